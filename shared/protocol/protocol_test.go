package protocol

import (
	"go/ast"
	"go/parser"
	"go/token"
	"slices"
	"strings"
	"testing"
)

// declaredNames parses this package's source for the constants of type
// Name: the table must hold each exactly once.
func declaredNames(t *testing.T) []Name {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "protocol.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []Name
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, sp := range g.Specs {
			v := sp.(*ast.ValueSpec)
			if id, ok := v.Type.(*ast.Ident); !ok || id.Name != "Name" {
				continue
			}
			for _, val := range v.Values {
				lit := val.(*ast.BasicLit)
				out = append(out, Name(strings.Trim(lit.Value, `"`)))
			}
		}
	}
	if len(out) < 30 {
		t.Fatalf("found %d transition names in protocol.go: the parse is wrong", len(out))
	}
	return out
}

func TestEveryNameIsInTheTableOnce(t *testing.T) {
	count := map[Name]int{}
	for _, tr := range Table() {
		count[tr.Name]++
	}
	for _, n := range declaredNames(t) {
		if count[n] != 1 {
			t.Errorf("%q is in the table %d times", n, count[n])
		}
		delete(count, n)
	}
	for n := range count {
		t.Errorf("%q is in the table but not declared", n)
	}
}

func TestTableIsWellFormed(t *testing.T) {
	valid := map[Item][]string{
		ItemBlock:     states(BlockLive, BlockClaimed, BlockRetiring, BlockDeleted, BlockPending, BlockDiscarded, BlockRejected, BlockQuarantined),
		ItemVersion:   states(GroupClaiming, GroupPlanned, GroupComplete, GroupRetired, GroupSuperseded, GroupQuarantined),
		ItemPartition: states(PartitionPending, PartitionRunning, PartitionDone),
	}
	for _, tr := range Table() {
		ok := valid[tr.Item]
		if ok == nil {
			t.Errorf("%s: unknown item %q", tr.Name, tr.Item)
			continue
		}
		for _, s := range append(slices.Clone(tr.From), tr.To) {
			if s != "" && !slices.Contains(ok, s) {
				t.Errorf("%s: %q is no %s state", tr.Name, s, tr.Item)
			}
		}
		if tr.Has(Absent) != (len(tr.From) == 0) {
			t.Errorf("%s: a create has no From, and only a create (From %v, absent %v)", tr.Name, tr.From, tr.Has(Absent))
		}
		if tr.Check && tr.To != "" {
			t.Errorf("%s: a check writes no state", tr.Name)
		}
		if tr.Code == "" {
			t.Errorf("%s: no code named", tr.Name)
		}
		for _, w := range tr.With {
			if _, err := Lookup(w); err != nil {
				t.Errorf("%s: with %v", tr.Name, err)
			}
		}
	}
}

// The properties below are the design's, read off the table: each would
// fail on a table entry that breaks it.

func TestFinalStatesAreNeverLeft(t *testing.T) {
	final := map[Item][]string{
		ItemBlock:   states(BlockDeleted, BlockDiscarded, BlockRejected),
		ItemVersion: states(GroupRetired, GroupSuperseded),
	}
	for _, tr := range Table() {
		if tr.Check || tr.Name == CreateNext {
			continue // a check reads; the next version replaces a final one
		}
		for _, f := range tr.From {
			if slices.Contains(final[tr.Item], f) {
				t.Errorf("%s leaves %s, a final state", tr.Name, f)
			}
		}
	}
	if !BlockDeleted.Final() || !BlockDiscarded.Final() || BlockLive.Final() {
		t.Error("BlockState.Final disagrees with the table")
	}
}

func TestEveryWriteNamesWhatItExpects(t *testing.T) {
	for _, tr := range Table() {
		switch tr.Item {
		case ItemBlock:
			// A block write expects the gen it read, or (a release, which
			// bumps the gen itself) the version that claims it.
			if !tr.Has(Absent) && !tr.Has(AtGen) && !tr.Has(ClaimedByWriter) {
				t.Errorf("%s: a block write that expects neither a gen nor its claimer", tr.Name)
			}
		case ItemVersion:
			if !tr.Has(Absent) && !tr.Has(AtVersion) {
				t.Errorf("%s: a version write that expects no version", tr.Name)
			}
		}
	}
}

// Every partition write but its creation is fenced, in its transaction,
// on the head at the partition's version and PLANNED.
func TestPartitionWritesAreFencedOnThePlannedHead(t *testing.T) {
	for _, tr := range Table() {
		if tr.Item != ItemPartition || tr.Check || tr.Has(Absent) {
			continue
		}
		fenced := false
		for _, w := range tr.With {
			f := MustLookup(w)
			fenced = fenced || (f.Item == ItemVersion && f.Has(AtVersion) && slices.Equal(f.From, states(GroupPlanned)))
		}
		if !fenced {
			t.Errorf("%s is not fenced on the head at v and PLANNED", tr.Name)
		}
	}
}

func TestCompletionNeedsEveryPartitionDone(t *testing.T) {
	for _, tr := range Table() {
		if tr.Item == ItemVersion && tr.To == string(GroupComplete) && !slices.Contains(tr.With, DoneCheck) {
			t.Errorf("%s completes a version without checking its partitions", tr.Name)
		}
	}
	if d := MustLookup(DoneCheck); !d.Check || !slices.Equal(d.From, states(PartitionDone)) {
		t.Errorf("the done check is %+v", d)
	}
}

// A new version is created only over a final one: one unfinished
// version per group.
func TestOneUnfinishedVersion(t *testing.T) {
	for _, tr := range Table() {
		if tr.Item != ItemVersion || tr.To != string(GroupClaiming) || tr.Has(Absent) {
			continue
		}
		for _, f := range tr.From {
			if GroupState(f).Unfinished() || GroupState(f) == GroupQuarantined {
				t.Errorf("%s creates a version over a %s one", tr.Name, f)
			}
		}
	}
}

// Only a claim takes a block, and only from a published, unclaimed LIVE
// block under the claim fence.
func TestClaimsAreExclusive(t *testing.T) {
	for _, tr := range Table() {
		if tr.Item != ItemBlock || tr.To != string(BlockClaimed) {
			continue
		}
		if !tr.Has(Unclaimed) || !tr.Has(Published) || !tr.Has(AtGen) || !slices.Contains(tr.With, ClaimFence) {
			t.Errorf("%s claims without all of unclaimed, published, gen and the fence: %+v", tr.Name, tr)
		}
	}
}

func TestBetween(t *testing.T) {
	for _, c := range []struct {
		from, to string
		want     Name
	}{
		{string(GroupClaiming), string(GroupPlanned), Plan},
		{string(GroupComplete), string(GroupRetired), RetireVersion},
		{string(GroupPlanned), string(GroupSuperseded), Supersede},
		{string(GroupClaiming), string(GroupSuperseded), Supersede},
		{string(GroupPlanned), string(GroupComplete), ""}, // needs the done checks
		{string(GroupRetired), string(GroupPlanned), ""},
	} {
		tr, err := Between(ItemVersion, c.from, c.to)
		if c.want == "" {
			if err == nil {
				t.Errorf("%s → %s: got %s, want none", c.from, c.to, tr.Name)
			}
			continue
		}
		if err != nil || tr.Name != c.want {
			t.Errorf("%s → %s: got %q (%v), want %q", c.from, c.to, tr.Name, err, c.want)
		}
	}
}

func TestChangesTravelInTheContext(t *testing.T) {
	ctx := t.Context()
	if ChangesFrom(ctx) != nil {
		t.Fatal("a bare context carries changes")
	}
	cs := []Change{{Transition: Commit, Item: ItemPartition, Owner: "w1"}}
	if got := ChangesFrom(WithChanges(ctx, cs)); len(got) != 1 || got[0].Owner != "w1" {
		t.Fatalf("got %+v", got)
	}
}
