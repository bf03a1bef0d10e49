package mems3_test

import (
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/sluice-dev/sluice/localstack/memaws/mems3"
)

// TestSnapshotRestore: a restored bucket lists exactly the versions it
// held at the snapshot — whatever was put or deleted since — new version
// ids continue from the snapshot's, and a snapshot can be restored again
// after the bucket changed once more.
func TestSnapshotRestore(t *testing.T) {
	f := newFixture(t, mems3.Options{}, true)
	ctx := t.Context()
	v1 := f.put(t, "k", "one")
	snap := f.srv.Snapshot()
	versions := func() []string {
		t.Helper()
		out, err := f.c.ListObjectVersions(ctx, &s3.ListObjectVersionsInput{Bucket: aws.String(f.bucket)})
		if err != nil {
			t.Fatal(err)
		}
		var vs []string
		for _, v := range out.Versions {
			vs = append(vs, aws.ToString(v.Key)+"@"+aws.ToString(v.VersionId))
		}
		for _, m := range out.DeleteMarkers {
			vs = append(vs, aws.ToString(m.Key)+"@marker")
		}
		return vs
	}
	want := []string{"k@" + aws.ToString(v1.VersionId)}
	var next []string
	for round := 1; round <= 2; round++ {
		v2 := f.put(t, "k", "two")
		f.put(t, "other", "x")
		if _, err := f.c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(f.bucket), Key: aws.String("k")}); err != nil {
			t.Fatal(err)
		}
		if n := len(versions()); n != 4 {
			t.Fatalf("round %d, after the changes: %d versions and markers, want 4", round, n)
		}
		next = append(next, aws.ToString(v2.VersionId))
		f.srv.Restore(snap)
		if got := versions(); len(got) != 1 || got[0] != want[0] {
			t.Errorf("round %d, restored: %v, want %v", round, got, want)
		}
		if body, _, err := f.get(ctx, "k", "", nil...); err != nil || body != "one" {
			t.Errorf("round %d, restored: k reads %q, %v", round, body, err)
		}
	}
	if next[0] != next[1] {
		t.Errorf("the version after the snapshot was %s, then %s after restoring it: ids must continue from the snapshot's", next[0], next[1])
	}
}
