package races

import (
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/shared/blockgen"
)

// corpus holds the blocks every replay uploads, generated once before any
// test runs. blockgen must not run while anything else in the process
// maps TSDB files: its writeBlock closes the index writer twice, and the
// second Close unmaps the symbol table a second time — whatever another
// goroutine has mapped at that address by then (concurrent blockgen calls
// crash with SIGSEGV; see docs/proofs.md).
var corpus struct {
	v1   []blockgen.Block // six 2h blocks of one 12h range, 40 series each
	late blockgen.Block   // a 2h block of that range: 40 of those series, and 8 new ones
}

// TestMain generates the corpus (under -short too: the replays run on the
// in-memory tier there), then lets the replays run side by side: each waits
// on the emulator most of the time, so more of them than there are cores
// fit (unless -parallel is given).
func TestMain(m *testing.M) {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		_ = flag.Set("test.parallel", "8")
	}
	dir, err := os.MkdirTemp("", "sluice-races-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := func() int {
		defer os.RemoveAll(dir)
		if err := generateCorpus(dir); err != nil {
			fmt.Fprintln(os.Stderr, "races: generate corpus:", err)
			return 1
		}
		return m.Run()
	}()
	os.Exit(code)
}

func generateCorpus(dir string) error {
	start := day()
	var err error
	gen := func(sub string, o blockgen.Options) []blockgen.Block {
		if err != nil {
			return nil
		}
		o.ThanosFiles = true
		o.SamplesPerSeries = 24
		var bs []blockgen.Block
		bs, err = blockgen.Generate(dir+"/"+sub, o)
		return bs
	}
	corpus.v1 = gen("v1", blockgen.Options{Tenant: "tenant", Start: start, Blocks: 6, Series: 40, Seed: 1})
	// Same seed: the late block repeats the 4h–6h block's samples of the 40
	// series and adds 8 series of its own, which only version 2 compacts.
	late := gen("late", blockgen.Options{Tenant: "tenant", Start: start.Add(4 * time.Hour), Blocks: 1, Series: 48, Seed: 1})
	if err == nil {
		corpus.late = late[0]
	}
	return err
}
