//go:build ignore

// Cortexcheck holds Sluice's bucket index up to Cortex's own code: for
// each tenant it reads <tenant>/bucket-index.json.gz with Cortex's
// bucketindex.ReadIndex, as a Cortex querier or store-gateway does, builds
// the index Cortex's own compactor would write from a listing of the same
// bucket (bucketindex.Updater), and compares the two: the same blocks with
// the same ranges and segments, the same deletion marks, and Sluice's
// times no earlier than Cortex's (an earlier uploaded_at would shorten the
// grace queriers give store-gateways; an earlier deletion_time would drop a
// block from queries sooner) nor later by more than -max-late (a later
// uploaded_at would let a querier miss a block unnoticed for longer). It
// also wants each index written within the last hour (Cortex's and
// Mimir's queriers refuse an older one), at least one block, no partial
// block (the bucket is idle), and deletion marks as -marks says. It exits
// 1 on any difference.
//
// It imports Cortex, whose packages build only with Cortex's own replace
// directives (docs/protocol.md), so unlike tools/thanoscheck it cannot be
// a module of its own: the build tag keeps it out of Sluice's module, and
// make cortex-check (scripts/cortex-check.sh) copies it into a Cortex
// checkout and builds it there, from the checkout's vendor/.
//
//	cortexcheck [-marks some|none] [-max-late 1m] ENDPOINT BUCKET TENANT...
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sort"
	"time"

	"github.com/go-kit/log"
	"github.com/thanos-io/objstore/providers/s3"

	"github.com/cortexproject/cortex/pkg/storage/tsdb/bucketindex"
)

// noSSE: the emulator's bucket has no per-tenant encryption.
type noSSE struct{}

func (noSSE) S3SSEType(string) string                 { return "" }
func (noSSE) S3SSEKMSKeyID(string) string             { return "" }
func (noSSE) S3SSEKMSEncryptionContext(string) string { return "" }

// expect is what the index of an idle bucket must show besides what
// Cortex's updater finds.
type expect struct {
	marks   string        // "some" or "none" deletion marks
	maxLate time.Duration // how much later than Cortex's Sluice's times may be
}

func main() {
	var want expect
	flag.StringVar(&want.marks, "marks", "some", `deletion marks each index must list: "some" or "none"`)
	flag.DurationVar(&want.maxLate, "max-late", time.Minute, "how much later than Cortex's Sluice's uploaded_at and deletion_time may be")
	flag.Parse()
	args := flag.Args()
	if len(args) < 3 || (want.marks != "some" && want.marks != "none") {
		fmt.Fprintln(os.Stderr, "usage: cortexcheck [-marks some|none] [-max-late 1m] ENDPOINT BUCKET TENANT...")
		os.Exit(2)
	}
	logger := log.NewNopLogger()
	bkt, err := s3.NewBucketWithConfig(logger, s3.Config{
		Bucket: args[1], Endpoint: args[0], Insecure: true, Region: "us-east-1",
		AccessKey: "test", SecretKey: "test", BucketLookupType: s3.PathLookup, PartSize: 64 << 20,
	}, "cortexcheck", nil)
	if err != nil {
		fail("bucket %s at %s: %v", args[1], args[0], err)
	}
	differences := 0
	for _, tenant := range args[2:] {
		differences += check(context.Background(), bkt, tenant, want, logger)
	}
	if differences > 0 {
		fail("%d difference(s) between Sluice's index and Cortex's", differences)
	}
	fmt.Println("cortexcheck: every index reads with Cortex's reader and lists what Cortex's updater lists")
}

func check(ctx context.Context, bkt *s3.Bucket, tenant string, want expect, logger log.Logger) int {
	got, err := bucketindex.ReadIndex(ctx, bkt, tenant, noSSE{}, logger)
	if err != nil {
		fmt.Printf("%s: Cortex's ReadIndex refuses Sluice's index: %v\n", tenant, err)
		return 1
	}
	cortex, partials, _, err := bucketindex.NewUpdater(bkt, tenant, noSSE{}, logger).UpdateIndex(ctx, nil)
	if err != nil {
		fail("%s: Cortex's updater: %v", tenant, err)
	}
	fmt.Printf("%s: Sluice's index (version %d): %d blocks, %d deletion marks; Cortex's updater: %d blocks, %d deletion marks, %d partial\n",
		tenant, got.Version, len(got.Blocks), len(got.BlockDeletionMarks), len(cortex.Blocks), len(cortex.BlockDeletionMarks), len(partials))
	differences := 0
	if age := time.Since(got.GetUpdatedAt()); age > time.Hour || age < -time.Minute {
		fmt.Printf("  updated_at %s is %s old: a querier refuses an index older than an hour\n", got.GetUpdatedAt().UTC(), age.Round(time.Second))
		differences++
	}
	for id, err := range partials {
		fmt.Printf("  block %s is partial to Cortex in an idle bucket: %v\n", id, err)
		differences++
	}
	if len(got.Blocks) == 0 {
		fmt.Println("  the index lists no block")
		differences++
	}
	if marks := len(got.BlockDeletionMarks); (want.marks == "some") != (marks > 0) {
		fmt.Printf("  the index lists %d deletion marks; want %s\n", marks, want.marks)
		differences++
	}
	blockID := func(b *bucketindex.Block) string { return b.ID.String() }
	gotBlocks, wantBlocks := byID(got.Blocks, blockID), byID(cortex.Blocks, blockID)
	var lateUpload, lateMark int64
	for _, id := range union(gotBlocks, wantBlocks) {
		g, w := gotBlocks[id], wantBlocks[id]
		switch {
		case g == nil:
			fmt.Printf("  block %s [%d, %d): only in Cortex's\n", id, w.MinTime, w.MaxTime)
			differences++
		case w == nil:
			fmt.Printf("  block %s [%d, %d): only in Sluice's\n", id, g.MinTime, g.MaxTime)
			differences++
		case g.MinTime != w.MinTime || g.MaxTime != w.MaxTime || g.SegmentsFormat != w.SegmentsFormat || g.SegmentsNum != w.SegmentsNum:
			fmt.Printf("  block %s: Sluice's [%d, %d) %q × %d, Cortex's [%d, %d) %q × %d\n", id,
				g.MinTime, g.MaxTime, g.SegmentsFormat, g.SegmentsNum, w.MinTime, w.MaxTime, w.SegmentsFormat, w.SegmentsNum)
			differences++
		case !within("block "+id+": Sluice's uploaded_at", g.UploadedAt, w.UploadedAt, want.maxLate, &lateUpload):
			differences++
		}
	}
	markID := func(m *bucketindex.BlockDeletionMark) string { return m.ID.String() }
	gotMarks, wantMarks := byID(got.BlockDeletionMarks, markID), byID(cortex.BlockDeletionMarks, markID)
	for _, id := range union(gotMarks, wantMarks) {
		g, w := gotMarks[id], wantMarks[id]
		switch {
		case g == nil:
			fmt.Printf("  deletion mark of %s: only in Cortex's\n", id)
			differences++
		case w == nil:
			fmt.Printf("  deletion mark of %s: only in Sluice's\n", id)
			differences++
		case !within("deletion mark of "+id+": Sluice's deletion_time", g.DeletionTime, w.DeletionTime, want.maxLate, &lateMark):
			differences++
		}
	}
	fmt.Printf("  Sluice's times are at most %d s (uploaded_at) and %d s (deletion_time) after Cortex's\n", lateUpload, lateMark)
	return differences
}

// within reports whether Sluice's time (unix s) is no earlier than
// Cortex's and at most maxLate later, saying what is wrong when it is not,
// and keeps the latest it has seen in latest.
func within(what string, sluice, cortex int64, maxLate time.Duration, latest *int64) bool {
	switch {
	case sluice < cortex:
		fmt.Printf("  %s %d is before Cortex's %d\n", what, sluice, cortex)
		return false
	case sluice > cortex+int64(maxLate/time.Second):
		fmt.Printf("  %s %d is more than %s after Cortex's %d\n", what, sluice, maxLate, cortex)
		return false
	}
	*latest = max(*latest, sluice-cortex)
	return true
}

func byID[T any](xs []T, id func(T) string) map[string]T {
	out := make(map[string]T, len(xs))
	for _, x := range xs {
		out[id(x)] = x
	}
	return out
}

func union[T any](a, b map[string]T) []string {
	var out []string
	for k := range a {
		out = append(out, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "cortexcheck: "+format+"\n", args...)
	os.Exit(1)
}
