package pipeline

import (
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/sluice-dev/sluice/shared/bucketindex"
	"github.com/sluice-dev/sluice/shared/config"
)

// TestKeepIndex: a scheduled pass keeps an index only when its content sum
// is the one it would write and it will still be younger than the maximum
// age at the next pass; with the defaults (15 min passes, 45 min) an
// unchanged index is rewritten every other pass.
func TestKeepIndex(t *testing.T) {
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	u := Uploader{&Deps{Config: config.Config{BucketIndexInterval: 15 * time.Minute, BucketIndexMaxAge: 45 * time.Minute},
		Now: func() time.Time { return now }}}
	head := func(sum string, age time.Duration) *s3.HeadObjectOutput {
		h := &s3.HeadObjectOutput{LastModified: aws.Time(now.Add(-age))}
		if sum != "" {
			h.Metadata = map[string]string{bucketindex.MetadataContentSum: sum}
		}
		return h
	}
	for _, tc := range []struct {
		name string
		head *s3.HeadObjectOutput
		keep bool
	}{
		{"unchanged, written one pass ago", head("abc", 15*time.Minute), true},
		{"unchanged, written just now", head("abc", time.Second), true},
		{"unchanged, two passes old: the next pass would find it 45 min old", head("abc", 30*time.Minute), false},
		{"unchanged, older than the maximum age", head("abc", 2*time.Hour), false},
		{"changed", head("def", time.Minute), false},
		{"written by another compactor (no sum)", head("", time.Minute), false},
		{"no modification time", &s3.HeadObjectOutput{Metadata: map[string]string{bucketindex.MetadataContentSum: "abc"}}, false},
	} {
		if _, keep := u.keepIndex(tc.head, "abc"); keep != tc.keep {
			t.Errorf("%s: keep = %v, want %v", tc.name, keep, tc.keep)
		}
	}
}
