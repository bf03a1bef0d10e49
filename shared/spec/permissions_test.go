package spec

import (
	"slices"
	"strings"
	"testing"
)

func TestPermissionsSpellOutEveryAction(t *testing.T) {
	r := Default("t")
	for _, f := range r.Functions {
		p := r.Permissions(f.ID)
		var actions []string
		for _, g := range p.S3 {
			actions = append(actions, g.Actions...)
		}
		actions = append(append(actions, p.S3List...), p.DynamoDB...)
		for _, a := range actions {
			if strings.ContainsAny(a, "*?") {
				t.Errorf("%s: wildcard action %q", f.ID, a)
			}
		}
	}
}

func TestOnlyTheUploaderDeletesOrPublishes(t *testing.T) {
	r := Default("t")
	for _, f := range r.Functions {
		for _, g := range r.Permissions(f.ID).S3 {
			deletes := slices.ContainsFunc(g.Actions, func(a string) bool { return strings.HasPrefix(a, "s3:Delete") })
			writesMeta := slices.Contains(g.Actions, "s3:PutObject") && slices.ContainsFunc(g.Objects, func(o ObjectPattern) bool {
				return o == MetaObjects || o == DeletionMarkObjects || o == NoCompactMarkObjects
			})
			if f.ID != Uploader && (deletes || writesMeta) {
				t.Errorf("%s may delete or publish: %v on %v", f.ID, g.Actions, g.Objects)
			}
		}
	}
}

func TestNobodyScansAndOnlyTheCleanerDeletesRecords(t *testing.T) {
	r := Default("t")
	for _, f := range r.Functions {
		p := r.Permissions(f.ID).DynamoDB
		if slices.Contains(p, "dynamodb:Scan") {
			t.Errorf("%s may scan", f.ID)
		}
		if got := slices.Contains(p, "dynamodb:DeleteItem"); got != (f.ID == Cleaner) {
			t.Errorf("%s: DeleteItem granted = %v", f.ID, got)
		}
	}
}

func TestAgeAlarmOutlastsARetry(t *testing.T) {
	for _, q := range Default("t").Queues {
		if a := q.AgeAlarm(); a < q.VisibilityTimeout {
			t.Errorf("%s: age alarm %v fires before one visibility timeout %v", q.ID, a, q.VisibilityTimeout)
		}
	}
}
