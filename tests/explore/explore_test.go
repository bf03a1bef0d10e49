package explore

import (
	"flag"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

var (
	flagCrashes     = flag.Int("explore.crashes", 0, "crashes per schedule")
	flagPreemptions = flag.Int("explore.preemptions", 0, "interleavings per schedule")
	flagStates      = flag.Int("explore.states", 0, "stop after this many states (0: no bound)")
	flagBudget      = flag.Duration("explore.budget", 0, "stop after this long (0: no bound)")
	flagCompact     = flag.Int("explore.compact", 2, "compact function instances")
	flagLate        = flag.Bool("explore.late", false, "upload the late block (version 2) at some point")
	flagReupload    = flag.Bool("explore.reupload", false, "upload a source again at some point")
	flagMutants     = flag.String("explore.mutants", "all", "the mutants TestExploreMutants explores (\"all\", or one by name)")
	flagReplay      = flag.String("explore.replay", os.Getenv("EXPLORE_REPLAY"), "replay one schedule (steps joined by ' → ', as a violation prints them)")
)

// blocksStart is the first block's start; the clock is three days later, so
// every range has closed.
var blocksStart = time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC)

// TestExplore explores one planner, two compact workers, one cleaner and
// one uploader compacting one group of two sources into two partitions.
// By default (make test) every order of deliveries and of time passing,
// exhaustively; the flags widen the scope to crashes, interleavings within
// a delivery, the late block (a second version) and a re-upload (make
// explore), which no longer finishes in minutes (docs/proofs.md).
func TestExplore(t *testing.T) {
	if !testing.Short() {
		t.Skip("the explorer runs in the fast tier (go test -short): it needs no emulator")
	}
	blocks, err := GenerateBlocks(t.TempDir(), blocksStart)
	if err != nil {
		t.Fatal(err)
	}
	scope := Scope{
		Actors:  map[string]int{"planner": 1, "compact": *flagCompact, "cleaner": 1, "uploader": 1},
		Crashes: *flagCrashes, Preemptions: *flagPreemptions,
		Late: *flagLate, Reupload: *flagReupload,
		MaxStates: *flagStates, Budget: *flagBudget,
	}
	e := New(t, blocks, blocksStart.Add(72*time.Hour), scope)
	var rep Report
	if *flagReplay != "" {
		rep = e.Replay(strings.Split(*flagReplay, " → "))
	} else {
		rep = e.Run()
	}
	var kinds []string
	for k, n := range rep.Kinds {
		kinds = append(kinds, k+"="+strconv.Itoa(n))
	}
	sort.Strings(kinds)
	t.Logf("explored %d states (%d transitions: %s; %d pruned as seen), %d quiescent states checked, %d AWS calls, deepest schedule %d steps, every schedule of up to %d steps checked, in %v; exhaustive: %v",
		rep.States, rep.Transitions, strings.Join(kinds, " "), rep.Pruned, rep.Terminal, rep.Calls, rep.MaxDepth, rep.Covered, rep.Took.Round(time.Millisecond), rep.Exhaustive)
	if testing.Verbose() {
		t.Logf("deepest schedule: %s", strings.Join(rep.Deepest, " → "))
	}
	if *flagReplay == "" && *flagBudget == 0 && *flagStates == 0 && !rep.Exhaustive && len(rep.Violations) == 0 {
		t.Errorf("the search stopped before it was exhaustive, with no bound set")
	}
	if *flagReplay == "" && rep.Terminal == 0 && len(rep.Violations) == 0 {
		t.Errorf("no schedule reached quiescence: nothing was checked at rest")
	}
	for _, v := range rep.Violations {
		t.Errorf("%s\nreplay: go test ./tests/explore -run TestExplore -explore.replay='%s'", v, strings.Join(v.Trace, " → "))
	}
}

// mutants are conditions of the protocol broken on purpose, each with the
// smallest scope in which the explorer catches it (make explore-mutants).
// docs/proofs.md ("Teeth") lists the conditions no scope here catches.
var mutants = []struct {
	m     Mutant
	scope Scope
}{
	// Incident 003: a holder whose lease expired commits over the
	// takeover's run — two preemptions: the takeover stops before its
	// commit while the holder finishes.
	{Mutant{Name: "commit ignores the lease", From: " AND leaseOwner = :owner"},
		Scope{Preemptions: 2}},
}

// TestExploreMutants: the explorer finds each mutant's violation — its
// checks can fail, and its interleavings reach the incidents.
func TestExploreMutants(t *testing.T) {
	if !testing.Short() {
		t.Skip("the explorer runs in the fast tier (go test -short): it needs no emulator")
	}
	blocks, err := GenerateBlocks(t.TempDir(), blocksStart)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range mutants {
		if *flagMutants != "" && *flagMutants != "all" && *flagMutants != tc.m.Name {
			continue
		}
		t.Run(tc.m.Name, func(t *testing.T) {
			scope := tc.scope
			scope.Actors = map[string]int{"planner": 1, "compact": 2, "cleaner": 1, "uploader": 1}
			scope.Mutant = &tc.m
			scope.Budget = *flagBudget
			if scope.Budget == 0 {
				scope.Budget = time.Minute // found in about a second
			}
			rep := New(t, blocks, blocksStart.Add(72*time.Hour), scope).Run()
			t.Logf("%d states, %d transitions in %v, exhaustive: %v", rep.States, rep.Transitions, rep.Took.Round(time.Millisecond), rep.Exhaustive)
			if len(rep.Violations) == 0 {
				t.Fatalf("mutant %q survived: no violation found", tc.m.Name)
			}
			t.Logf("caught: %s", rep.Violations[0])
		})
	}
}
