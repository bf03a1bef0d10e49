package stack

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/shared/spec"
)

// statement is one IAM policy statement with its values rendered.
type statement struct {
	Where     string // logical id of the policy, role or resource policy
	Sid       string
	Effect    string
	Actions   []string
	Resources []string
	Condition string // rendered JSON, "" for none
}

// policyDocs lists the policy documents in the template with where they
// are: identity policies, inline role policies and resource policies.
func (t template) policyDocs() map[string]any {
	docs := map[string]any{}
	for id, r := range t.Resources {
		switch r.Type {
		case "AWS::IAM::Policy", "AWS::IAM::ManagedPolicy", "AWS::S3::BucketPolicy", "AWS::SQS::QueuePolicy", "AWS::SNS::TopicPolicy":
			docs[id] = r.Properties["PolicyDocument"]
		case "AWS::IAM::Role":
			pols, _ := r.Properties["Policies"].([]any)
			for i, p := range pols {
				docs[fmt.Sprintf("%s/inline%d", id, i)] = p.(map[string]any)["PolicyDocument"]
			}
		}
	}
	return docs
}

func parseStatements(where string, doc any) []statement {
	m, _ := doc.(map[string]any)
	raw, _ := m["Statement"].([]any)
	out := make([]statement, 0, len(raw))
	for _, r := range raw {
		s := r.(map[string]any)
		st := statement{
			Where:     where,
			Sid:       render(s["Sid"]),
			Effect:    render(s["Effect"]),
			Actions:   list(s["Action"]),
			Resources: list(s["Resource"]),
		}
		if c, ok := s["Condition"]; ok {
			b, _ := json.Marshal(c)
			st.Condition = string(b)
		}
		out = append(out, st)
	}
	return out
}

// allStatements is every statement in the template, in a stable order.
func (t template) allStatements() []statement {
	docs := t.policyDocs()
	ids := make([]string, 0, len(docs))
	for id := range docs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var out []statement
	for _, id := range ids {
		out = append(out, parseStatements(id, docs[id])...)
	}
	return out
}

// roleStatements are the identity statements attached to role roleID.
func (t template) roleStatements(roleID string) []statement {
	var out []statement
	for _, id := range t.ofType("AWS::IAM::Policy") {
		p := t.Resources[id].Properties
		if slices.Contains(list(p["Roles"]), "${"+roleID+"}") {
			out = append(out, parseStatements(id, p["PolicyDocument"])...)
		}
	}
	pols, _ := t.Resources[roleID].Properties["Policies"].([]any)
	for i, p := range pols {
		out = append(out, parseStatements(fmt.Sprintf("%s/inline%d", roleID, i), p.(map[string]any)["PolicyDocument"])...)
	}
	return out
}

const tlsOnly = `{"Bool":{"aws:SecureTransport":"false"}}`

// wildcardProblems reports every statement that grants a wildcard action.
// A Deny with a wildcard is allowed only as the TLS-only guard.
func wildcardProblems(t template) []string {
	var probs []string
	for _, st := range t.allStatements() {
		for _, a := range st.Actions {
			if !strings.ContainsAny(a, "*?") {
				continue
			}
			if st.Effect == "Deny" && st.Condition == tlsOnly {
				continue
			}
			probs = append(probs, fmt.Sprintf("%s %s: %s action %q", st.Where, st.Sid, st.Effect, a))
		}
	}
	return probs
}

// roleOf returns the logical id of function fnID's role.
func (t template) roleOf(fnID string) string {
	return strings.TrimSuffix(strings.TrimPrefix(render(t.Resources[fnID].Properties["Role"]), "${"), ".Arn}")
}

// safetyProblems reports the grants that would break docs/design.md's
// guarantees whatever the spec says: only the uploader deletes objects or
// writes meta.json and markers; planner and cleaner write no object;
// compact writes only index and chunks; nobody scans; only the cleaner
// deletes items; nothing is granted on "*".
func safetyProblems(fn spec.FunctionID, sts []statement) []string {
	var probs []string
	for _, st := range sts {
		if st.Effect != "Allow" {
			continue
		}
		for _, a := range st.Actions {
			bad := func(why string) { probs = append(probs, fmt.Sprintf("%s: %s %s: %s", fn, st.Sid, a, why)) }
			switch {
			case strings.HasPrefix(a, "s3:Delete") && fn != spec.Uploader:
				bad("only the uploader deletes objects")
			case a == "dynamodb:DeleteItem" && fn != spec.Cleaner:
				bad("only the cleaner deletes items (agenda and index entries)")
			case a == "dynamodb:Scan" || a == "dynamodb:DeleteTable" || strings.HasPrefix(a, "dynamodb:BatchWrite"):
				bad("nobody scans, batch-writes or drops the table")
			case a == "s3:PutObject" || strings.HasPrefix(a, "s3:PutObject") || a == "s3:RestoreObject" || a == "s3:ReplicateObject":
				for _, r := range st.Resources {
					meta := strings.HasSuffix(r, "/meta.json") || strings.HasSuffix(r, "-mark.json") ||
						strings.HasSuffix(r, "/*/"+bucketIndexFile)
					switch {
					case fn == spec.Planner || fn == spec.Cleaner:
						bad("planner and cleaner write no object: " + r)
					case fn == spec.Compact && !(strings.HasSuffix(r, "/*/index") || strings.HasSuffix(r, "/*/chunks/*")):
						bad("compact writes only index and chunks: " + r)
					case fn == spec.Uploader && !meta:
						bad("the uploader writes only meta.json, markers and the bucket index: " + r)
					}
				}
			}
			for _, r := range st.Resources {
				if r == "*" {
					bad("granted on every resource")
				}
			}
		}
	}
	return probs
}

// grantSet renders statements as "action on resource [if condition]".
func grantSet(sts []statement) []string {
	var out []string
	for _, st := range sts {
		if st.Effect != "Allow" {
			continue
		}
		for _, a := range st.Actions {
			for _, r := range st.Resources {
				g := a + " on " + r
				if st.Condition != "" {
					g += " if " + st.Condition
				}
				out = append(out, g)
			}
		}
	}
	sort.Strings(out)
	return slices.Compact(out)
}

// wantGrants is what spec.Permissions, spec.Function.Sends and the queue a
// function consumes say the role of f must hold, and nothing more.
func (d *deployment) wantGrants(t *testing.T, f spec.Function) []string {
	r := d.props.Resources
	perm := r.Permissions(f.ID)
	bucket := d.bucketARN(t)
	var out []string
	for _, g := range perm.S3 {
		for _, a := range g.Actions {
			for _, o := range g.Objects {
				on := a + " on " + bucket + "/" + d.props.KeyPrefix + string(o)
				if a == "s3:PutObject" && g.OnlyIfNoneMatch {
					out = append(out, on+` if {"Null":{"s3:if-none-match":"false"}}`, on+` if {"Bool":{"s3:ObjectCreationOperation":"false"}}`)
					continue
				}
				if a == "s3:PutObject" && g.Conditional {
					out = append(out, on+` if {"Null":{"s3:if-none-match":"false"}}`, on+` if {"Null":{"s3:if-match":"false"}}`)
					continue
				}
				out = append(out, on)
			}
		}
	}
	for _, a := range perm.S3List {
		out = append(out, a+" on "+bucket+` if {"StringLike":{"s3:prefix":["`+d.props.KeyPrefix+`*"]}}`)
	}
	table := "${" + d.tableID(t) + ".Arn}"
	for _, a := range perm.DynamoDB {
		out = append(out, a+" on "+table)
	}
	for _, q := range f.Sends {
		out = append(out, "sqs:SendMessage on ${"+d.queueID(t, r.Queue(q))+".Arn}")
	}
	for _, q := range r.Queues {
		if q.Consumer != f.ID {
			continue
		}
		for _, a := range []string{"sqs:ReceiveMessage", "sqs:ChangeMessageVisibility", "sqs:GetQueueUrl", "sqs:DeleteMessage", "sqs:GetQueueAttributes"} {
			out = append(out, a+" on ${"+d.queueID(t, q)+".Arn}")
		}
	}
	fn := d.cfn.Resources[d.functionID(t, f)].Properties
	logs := strings.TrimSuffix(strings.TrimPrefix(render(fn["LoggingConfig"].(map[string]any)["LogGroup"]), "${"), "}")
	for _, a := range []string{"logs:CreateLogStream", "logs:PutLogEvents"} {
		out = append(out, a+" on ${"+logs+".Arn}")
	}
	sort.Strings(out)
	return out
}

func TestNoStatementGrantsAWildcardAction(t *testing.T) {
	each(t, func(t *testing.T, d *deployment) {
		if len(d.cfn.allStatements()) == 0 {
			t.Fatal("no policy statements found: the walker is broken")
		}
		for _, p := range wildcardProblems(d.cfn) {
			t.Error(p)
		}
	})
}

func TestEachRoleHoldsExactlyItsSpecPermissions(t *testing.T) {
	each(t, func(t *testing.T, d *deployment) {
		seen := map[string]spec.FunctionID{}
		for _, f := range d.props.Resources.Functions {
			fnID := d.functionID(t, f)
			role := d.cfn.roleOf(fnID)
			if other, ok := seen[role]; ok {
				t.Errorf("%s shares role %s with %s", f.ID, role, other)
			}
			seen[role] = f.ID
			rp := d.cfn.Resources[role].Properties
			if rp["ManagedPolicyArns"] != nil || rp["Policies"] != nil {
				t.Errorf("%s: role %s has managed or inline policies: %v %v", f.ID, role, rp["ManagedPolicyArns"], rp["Policies"])
			}
			if got := render(rp["AssumeRolePolicyDocument"]); !strings.Contains(got, `"Service":"lambda.amazonaws.com"`) {
				t.Errorf("%s: role %s is not for Lambda: %s", f.ID, role, got)
			}
			sts := d.cfn.roleStatements(role)
			for _, p := range safetyProblems(f.ID, sts) {
				t.Error(p)
			}
			got, want := grantSet(sts), d.wantGrants(t, f)
			for _, g := range got {
				if !slices.Contains(want, g) {
					t.Errorf("%s: extra grant %s", f.ID, g)
				}
			}
			for _, g := range want {
				if !slices.Contains(got, g) {
					t.Errorf("%s: missing grant %s", f.ID, g)
				}
			}
		}
	})
}

// The uploader's distinguishing powers are really there (a spec change that
// took them away would leave the pipeline unable to publish or delete).
func TestOnlyTheUploaderDeletesAndPublishes(t *testing.T) {
	each(t, func(t *testing.T, d *deployment) {
		for _, f := range d.props.Resources.Functions {
			grants := grantSet(d.cfn.roleStatements(d.cfn.roleOf(d.functionID(t, f))))
			deletes := slices.ContainsFunc(grants, func(g string) bool { return strings.HasPrefix(g, "s3:DeleteObjectVersion on ") })
			publishes := slices.ContainsFunc(grants, func(g string) bool {
				return strings.HasPrefix(g, "s3:PutObject on ") && strings.HasSuffix(g, `/*/meta.json if {"Null":{"s3:if-none-match":"false"}}`)
			})
			if isUp := f.ID == spec.Uploader; deletes != isUp || publishes != isUp {
				t.Errorf("%s: deletes=%v publishes=%v", f.ID, deletes, publishes)
			}
		}
	})
}

// Every role in the stack — the four functions' and those CDK creates for
// its own custom resources (the bucket notifications handler) — is scoped:
// no AWS managed policy (AWSLambdaBasicExecutionRole writes every log
// group of the account), no statement on every resource.
func TestEveryRoleIsScoped(t *testing.T) {
	each(t, func(t *testing.T, d *deployment) {
		roles := d.cfn.ofType("AWS::IAM::Role")
		if len(roles) < 5 {
			t.Fatalf("%d roles: want the four functions' and the notifications handler's", len(roles))
		}
		for _, role := range roles {
			if m, ok := d.cfn.Resources[role].Properties["ManagedPolicyArns"]; ok {
				t.Errorf("role %s carries managed policies %s", role, render(m))
			}
			sts := d.cfn.roleStatements(role)
			if len(sts) == 0 {
				t.Errorf("role %s has no statements: the walker missed its policies", role)
			}
			for _, st := range sts {
				for _, r := range st.Resources {
					if r == "*" {
						t.Errorf("role %s: %s allows %v on every resource", role, st.Sid, st.Actions)
					}
				}
			}
		}
	})
}

// bucketIndexFile is the one object the uploader replaces (If-Match).
const bucketIndexFile = "bucket-index.json.gz"

// onlyBucketIndex reports whether every resource is a tenant's bucket index.
func onlyBucketIndex(rs []string) bool {
	for _, r := range rs {
		if !strings.HasSuffix(r, "/*/"+bucketIndexFile) {
			return false
		}
	}
	return len(rs) > 0
}

// Compact and the uploader create objects, never overwrite one: every
// s3:PutObject they hold is conditional — on the request's If-None-Match
// header, or (multipart uploads' parts, which carry none) on not creating
// the object. The one exception is the bucket index, which the uploader
// may also replace with If-Match on the version it read, and only that.
func TestWritesOnlyIfNoneMatch(t *testing.T) {
	each(t, func(t *testing.T, d *deployment) {
		for _, f := range d.props.Resources.Functions {
			writes := 0
			for _, st := range d.cfn.roleStatements(d.cfn.roleOf(d.functionID(t, f))) {
				if st.Effect != "Allow" || !slices.Contains(st.Actions, "s3:PutObject") {
					continue
				}
				writes++
				ifMatch := st.Condition == `{"Null":{"s3:if-match":"false"}}` && f.ID == spec.Uploader && onlyBucketIndex(st.Resources)
				if !ifMatch && st.Condition != `{"Null":{"s3:if-none-match":"false"}}` && st.Condition != `{"Bool":{"s3:ObjectCreationOperation":"false"}}` {
					t.Errorf("%s: statement %s allows s3:PutObject without If-None-Match: %q", f.ID, st.Sid, st.Condition)
				}
			}
			if want := f.ID == spec.Compact || f.ID == spec.Uploader; (writes > 0) != want {
				t.Errorf("%s: %d s3:PutObject statements", f.ID, writes)
			}
		}
	})
}

// The checkers above must catch what they claim to: inject violations into
// a copy of the synthesized template.
func TestCheckersCatchViolations(t *testing.T) {
	d := synth(t, "created")
	var tm template
	b, _ := json.Marshal(d.cfn)
	if err := json.Unmarshal(b, &tm); err != nil {
		t.Fatal(err)
	}
	r := d.props.Resources
	compactRole := tm.roleOf(d.functionID(t, r.Function(spec.Compact)))
	plannerRole := tm.roleOf(d.functionID(t, r.Function(spec.Planner)))
	inject := func(role string, st map[string]any) {
		for _, id := range tm.ofType("AWS::IAM::Policy") {
			p := tm.Resources[id].Properties
			if slices.Contains(list(p["Roles"]), "${"+role+"}") {
				doc := p["PolicyDocument"].(map[string]any)
				doc["Statement"] = append(doc["Statement"].([]any), st)
				return
			}
		}
		t.Fatalf("no policy for %s", role)
	}
	bucket := d.bucketARN(t)
	inject(compactRole, map[string]any{"Sid": "Bad1", "Effect": "Allow", "Action": "s3:DeleteObjectVersion", "Resource": bucket + "/*/index"})
	inject(compactRole, map[string]any{"Sid": "Bad2", "Effect": "Allow", "Action": "s3:PutObject", "Resource": bucket + "/*/meta.json"})
	inject(plannerRole, map[string]any{"Sid": "Bad3", "Effect": "Allow", "Action": []any{"s3:Get*"}, "Resource": bucket + "/*"})
	inject(compactRole, map[string]any{"Sid": "Bad5", "Effect": "Allow", "Action": "dynamodb:DeleteItem", "Resource": "${" + d.tableID(t) + ".Arn}"})
	inject(plannerRole, map[string]any{"Sid": "Bad4", "Effect": "Allow", "Action": "dynamodb:Scan", "Resource": "*"})

	if got := wildcardProblems(tm); len(got) != 1 || !strings.Contains(got[0], "Bad3") {
		t.Errorf("wildcard problems %v: want exactly Bad3", got)
	}
	compact := strings.Join(safetyProblems(spec.Compact, tm.roleStatements(compactRole)), "\n")
	for _, sid := range []string{"Bad1", "Bad2", "Bad5"} {
		if !strings.Contains(compact, sid) {
			t.Errorf("compact's %s not reported:\n%s", sid, compact)
		}
	}
	planner := strings.Join(safetyProblems(spec.Planner, tm.roleStatements(plannerRole)), "\n")
	if !strings.Contains(planner, "Bad4") || !strings.Contains(planner, "every resource") {
		t.Errorf("planner's Bad4 not reported:\n%s", planner)
	}
	if extra := grantSet(tm.roleStatements(plannerRole)); slices.Equal(extra, d.wantGrants(t, r.Function(spec.Planner))) {
		t.Error("an injected grant left the planner's grant set equal to the spec's")
	}
}

// TestStatementIDsAreUniquePerPolicy: IAM refuses a policy document whose
// statement ids repeat, and cfn-lint flags it (E3510); two of the
// uploader's S3 grants once made the same ids.
func TestStatementIDsAreUniquePerPolicy(t *testing.T) {
	each(t, func(t *testing.T, d *deployment) {
		for where, doc := range d.cfn.policyDocs() {
			seen := map[string]bool{}
			for _, st := range parseStatements(where, doc) {
				if st.Sid != "" && seen[st.Sid] {
					t.Errorf("%s: statement id %s appears twice", where, st.Sid)
				}
				seen[st.Sid] = true
			}
		}
	})
}
