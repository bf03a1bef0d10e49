package stack

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/jsii-runtime-go"

	"github.com/sluice-dev/sluice/shared/spec"
)

// Synthesizing through jsii costs seconds on two cores, so each mode is
// synthesized once per test binary and every test reads the shared result.

// deployment is one synthesized stack: the assertions handle for
// HasResourceProperties and friends, and the same template as plain Go
// values for the checks that walk it (IAM statements, environments).
type deployment struct {
	name  string
	props Props // with defaults applied
	tmpl  assertions.Template
	cfn   template
}

var (
	codeDir   string
	synthOnce = map[string]*sync.Once{"created": {}, "imported": {}}
	synthed   = map[string]*deployment{}
	synthErr  = map[string]error{}
)

// modes are the two ways to deploy: a bucket of its own with non-default
// lifecycle settings, and an existing single-tenant bucket under a prefix.
func modes() map[string]Props {
	return map[string]Props{
		"created": {
			Resources:             spec.Default("sluice"),
			NoncurrentVersionDays: 45,
			AbortMultipartDays:    3,
		},
		"imported": {
			Resources:  spec.Default("sluice"),
			BucketName: "existing-bucket",
			KeyPrefix:  "prom", // normalised to "prom/"
			Layout:     spec.LayoutSingleTenant,
			Tenant:     "prod",
			Env:        map[string]string{"SLUICE_DELETION_DELAY": "24h"},
		},
	}
}

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sluice-infra-code-")
	if err != nil {
		panic(err)
	}
	codeDir = dir
	for _, f := range spec.Default("x").Functions {
		d := filepath.Join(dir, string(f.ID))
		if err := os.MkdirAll(d, 0o755); err != nil {
			panic(err)
		}
		if err := os.WriteFile(filepath.Join(d, "bootstrap"), []byte("#!/bin/sh\n# "+string(f.ID)+"\n"), 0o755); err != nil {
			panic(err)
		}
	}
	code := m.Run()
	jsii.Close()
	os.RemoveAll(dir)
	os.Exit(code)
}

// synth returns the deployment of mode, synthesizing it on first use.
func synth(t *testing.T, mode string) *deployment {
	t.Helper()
	synthOnce[mode].Do(func() {
		props := modes()[mode]
		props.Code = func(fn spec.FunctionID) awslambda.Code {
			return awslambda.Code_FromAsset(jsii.String(filepath.Join(codeDir, string(fn))), nil)
		}
		app := awscdk.NewApp(nil)
		s, err := New(app, "Sluice", props, nil)
		if err != nil {
			synthErr[mode] = err
			return
		}
		d := &deployment{name: mode, props: props.withDefaults(), tmpl: assertions.Template_FromStack(s.Stack, nil)}
		raw, err := json.Marshal(d.tmpl.ToJSON())
		if err == nil {
			err = json.Unmarshal(raw, &d.cfn)
		}
		synthErr[mode] = err
		synthed[mode] = d
	})
	if err := synthErr[mode]; err != nil {
		t.Fatalf("synth %s: %v", mode, err)
	}
	return synthed[mode]
}

// each runs f as a subtest for both modes.
func each(t *testing.T, f func(t *testing.T, d *deployment)) {
	for _, mode := range []string{"created", "imported"} {
		t.Run(mode, func(t *testing.T) { f(t, synth(t, mode)) })
	}
}

// check runs one assertions call; a mismatch (a jsii panic) fails the test
// with the library's explanation instead of crashing the binary.
func check(t *testing.T, what string, f func()) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Errorf("%s:\n%v", what, r)
		}
	}()
	f()
}

// template is a synthesized CloudFormation template as Go values.
type template struct {
	Resources map[string]resource `json:"Resources"`
	Outputs   map[string]struct {
		Value any `json:"Value"`
	} `json:"Outputs"`
}

type resource struct {
	Type           string         `json:"Type"`
	Properties     map[string]any `json:"Properties"`
	DeletionPolicy string         `json:"DeletionPolicy"`
}

// ofType returns the logical ids of the resources of type typ, sorted.
func (t template) ofType(typ string) []string {
	var ids []string
	for id, r := range t.Resources {
		if r.Type == typ {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	return ids
}

// idWhere returns the logical id of the one resource of type typ whose
// property key renders as value.
func (t template) idWhere(typ, key, value string) (string, error) {
	var found []string
	for _, id := range t.ofType(typ) {
		if render(t.Resources[id].Properties[key]) == value {
			found = append(found, id)
		}
	}
	if len(found) != 1 {
		return "", fmt.Errorf("%s with %s=%q: found %v, want exactly one", typ, key, value, found)
	}
	return found[0], nil
}

// render flattens CloudFormation values to strings: Fn::Join concatenates,
// Ref X is ${X}, Fn::GetAtt [X, A] is ${X.A}.
func render(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	case float64, bool:
		return fmt.Sprint(x)
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = render(e)
		}
		return strings.Join(parts, ",")
	case map[string]any:
		if ref, ok := x["Ref"]; ok {
			return "${" + render(ref) + "}"
		}
		if ga, ok := x["Fn::GetAtt"].([]any); ok && len(ga) == 2 {
			return "${" + render(ga[0]) + "." + render(ga[1]) + "}"
		}
		if j, ok := x["Fn::Join"].([]any); ok && len(j) == 2 {
			parts, _ := j[1].([]any)
			out := make([]string, len(parts))
			for i, p := range parts {
				out[i] = render(p)
			}
			return strings.Join(out, render(j[0]))
		}
		b, _ := json.Marshal(x)
		return string(b)
	}
	return fmt.Sprint(v)
}

// list returns v as a list of rendered strings (CloudFormation allows a
// single value where a list is expected).
func list(v any) []string {
	if l, ok := v.([]any); ok {
		out := make([]string, len(l))
		for i, e := range l {
			out[i] = render(e)
		}
		return out
	}
	if v == nil {
		return nil
	}
	return []string{render(v)}
}

// ids of the resources every test refers to.
func (d *deployment) queueID(t *testing.T, q spec.Queue) string {
	t.Helper()
	id, err := d.cfn.idWhere("AWS::SQS::Queue", "QueueName", d.props.Resources.QueueName(q))
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func (d *deployment) dlqID(t *testing.T, q spec.Queue) string {
	t.Helper()
	id, err := d.cfn.idWhere("AWS::SQS::Queue", "QueueName", d.props.Resources.DLQName(q))
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func (d *deployment) functionID(t *testing.T, f spec.Function) string {
	t.Helper()
	id, err := d.cfn.idWhere("AWS::Lambda::Function", "FunctionName", d.props.Resources.FunctionName(f))
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func (d *deployment) tableID(t *testing.T) string {
	t.Helper()
	id, err := d.cfn.idWhere("AWS::DynamoDB::Table", "TableName", d.props.Resources.TableName())
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// bucketARN is the rendered ARN of the bucket in this mode.
func (d *deployment) bucketARN(t *testing.T) string {
	t.Helper()
	if d.props.BucketName != "" {
		return "arn:${AWS::Partition}:s3:::" + d.props.BucketName
	}
	ids := d.cfn.ofType("AWS::S3::Bucket")
	if len(ids) != 1 {
		t.Fatalf("buckets: %v, want one", ids)
	}
	return "${" + ids[0] + ".Arn}"
}

func getAtt(id, attr string) map[string]any {
	return map[string]any{"Fn::GetAtt": []any{id, attr}}
}

func ref(id string) map[string]any { return map[string]any{"Ref": id} }
