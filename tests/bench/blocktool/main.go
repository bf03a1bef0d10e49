// Command blocktool writes blocks with the block engine for external
// readers to check (scripts/promtool-check.sh): synthetic sources
// (replicated RF=3 with native histograms, plus consecutive blocks), their
// compaction into N=1 and N=4 partitions, and those partitions compacted
// again with N=2. Each output directory is a TSDB directory of blocks. It
// prints one line per block: "<db dir> <block ULID>".
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/sluice-dev/sluice/shared/blockgen"
	"github.com/sluice-dev/sluice/shared/blockmeta"
	"github.com/sluice-dev/sluice/shared/compaction"
	"github.com/sluice-dev/sluice/shared/equiv"
)

func main() {
	out := flag.String("out", "", "directory to write into (required)")
	series := flag.Int("series", 300, "series per source block")
	flag.Parse()
	if *out == "" {
		log.Fatal("-out is required")
	}
	ctx := context.Background()
	src := filepath.Join(*out, "sources")
	blocks, err := blockgen.Generate(src, blockgen.Options{Tenant: "t", Blocks: 3, Series: *series, ReplicationFactor: 3, Histograms: true, ThanosFiles: true, ExternalLabels: map[string]string{"__org_id__": "t"}})
	if err != nil {
		log.Fatal(err)
	}
	var sources []string
	for _, b := range blocks {
		sources = append(sources, b.Dir)
		fmt.Println(src, b.Meta.ULID)
	}
	created := time.Date(2024, 1, 2, 0, 0, 0, 0, time.UTC)
	compactAll := func(name string, in []string, n int) []string {
		dir := filepath.Join(*out, name)
		var outs []string
		for p := 0; p < n; p++ {
			job := compaction.Job{SourceDirs: in, Partition: p, PartitionCount: n, OutDir: dir,
				ULID: compaction.OutputULID(created, "t", name, 1, p), ThanosLabels: map[string]string{"__org_id__": "t"}}
			if n > 1 {
				job.PartitionInfo = &blockmeta.PartitionInfo{PartitionedGroupID: 1, PartitionCount: n, PartitionID: p, PartitionedGroupCreationTime: created.Unix()}
			}
			res, err := compaction.Compact(ctx, nil, job)
			if err != nil {
				log.Fatal(err)
			}
			if !res.Empty {
				outs = append(outs, res.Dir)
				fmt.Println(dir, res.Meta.ULID)
			}
		}
		rep, err := equiv.Check(ctx, sources, outs, nil)
		if err != nil || !rep.OK() {
			log.Fatalf("%s not equivalent to its sources: %v %s", name, err, rep)
		}
		fmt.Fprintf(os.Stderr, "%s: %d blocks, equivalent to the sources (%s)\n", name, len(outs), rep)
		return outs
	}
	compactAll("n1", sources, 1)
	n4 := compactAll("n4", sources, 4)
	compactAll("n4-then-n2", n4, 2)
}
