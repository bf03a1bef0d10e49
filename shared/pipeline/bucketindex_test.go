package pipeline

import (
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/sluice-dev/sluice/shared/bucketindex"
	"github.com/sluice-dev/sluice/shared/config"
)

// TestKeepIndex: a scheduled pass keeps an index only when its content sum
// is the one it would write and its updated_at will still be younger than
// the maximum age at the next pass. With the defaults (15 min passes, 40
// min) the cut-off is 25 min, halfway between two passes, so a pass a
// little early or late still rewrites an unchanged index every other time.
func TestKeepIndex(t *testing.T) {
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	u := Uploader{&Deps{Config: config.Config{BucketIndexInterval: 15 * time.Minute, BucketIndexMaxAge: 40 * time.Minute},
		Now: func() time.Time { return now }}}
	head := func(sum string, age time.Duration) *s3.HeadObjectOutput {
		return &s3.HeadObjectOutput{Metadata: map[string]string{
			bucketindex.MetadataContentSum: sum,
			bucketindex.MetadataUpdatedAt:  strconv.FormatInt(now.Add(-age).Unix(), 10)}}
	}
	for _, tc := range []struct {
		name string
		head *s3.HeadObjectOutput
		keep bool
	}{
		{"unchanged, written just now", head("abc", time.Second), true},
		{"unchanged, one pass old, the pass a minute early", head("abc", 14*time.Minute), true},
		{"unchanged, one pass old, the pass a minute late", head("abc", 16*time.Minute), true},
		{"unchanged, just under the cut-off", head("abc", 25*time.Minute-time.Second), true},
		{"unchanged, at the cut-off: the next pass would find it 40 min old", head("abc", 25*time.Minute), false},
		{"unchanged, two passes old, the pass a minute early", head("abc", 29*time.Minute), false},
		{"unchanged, older than the maximum age", head("abc", 2*time.Hour), false},
		{"changed", head("def", time.Minute), false},
		{"written by another compactor (no metadata)", &s3.HeadObjectOutput{}, false},
		{"no updated_at beside the sum", &s3.HeadObjectOutput{Metadata: map[string]string{bucketindex.MetadataContentSum: "abc"}}, false},
	} {
		age, keep := u.keepIndex(tc.head, "abc")
		if keep != tc.keep {
			t.Errorf("%s: keep = %v (age %v), want %v", tc.name, keep, age, tc.keep)
		}
	}
	if age, _ := u.keepIndex(head("abc", 14*time.Minute), "abc"); age != 14*time.Minute {
		t.Errorf("age = %v, want the 14m since its updated_at", age)
	}
}
