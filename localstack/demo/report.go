package demo

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluice-dev/sluice/shared/awsenv"
	"github.com/sluice-dev/sluice/shared/bytesize"
	"github.com/sluice-dev/sluice/shared/cli"
	"github.com/sluice-dev/sluice/shared/protocol"
)

// requests turns the counter's snapshots (before upload, after upload,
// after the pipeline, after the checks) into per-phase counts.
func (r *run) requests() {
	if len(r.snaps) < 4 {
		return
	}
	at := func(i int) map[string]int {
		m := map[string]int{}
		for _, c := range r.snaps[i] {
			m[c.Operation] = c.N
		}
		return m
	}
	s0, s1, s2, s3 := at(0), at(1), at(2), at(3)
	for _, op := range sortedOps(r.snaps[3]) {
		r.sum.Requests = append(r.sum.Requests, Request{Operation: op,
			Upload: s1[op] - s0[op], Pipeline: s2[op] - s1[op], Checks: s3[op] - s2[op]})
	}
	// Only the pipeline's runner names callers: every named request is the
	// pipeline's; the unnamed ones of its phase are the runner's polling.
	by := map[string]int{}
	ops := map[string]map[string]int{}
	for _, c := range r.counter.SnapshotByCaller() {
		if c.Caller != "" {
			by[c.Caller] += c.N
			if ops[c.Caller] == nil {
				ops[c.Caller] = map[string]int{}
			}
			ops[c.Caller][c.Operation] += c.N
		}
	}
	named := 0
	for _, n := range by {
		named += n
	}
	pipeline := 0
	for op, n := range s2 {
		pipeline += n - s1[op]
	}
	by["event source"] = pipeline - named
	for _, caller := range slices.Sorted(maps.Keys(by)) {
		r.sum.ByCaller = append(r.sum.ByCaller, CallerRequests{Caller: caller, Requests: by[caller], Operations: ops[caller]})
	}
}

func sortedOps(cs []awsenv.Count) []string {
	out := make([]string, 0, len(cs))
	for _, c := range cs {
		out = append(out, c.Operation)
	}
	sort.Strings(out)
	return out
}

var afterStates = []protocol.BlockState{protocol.BlockLive, protocol.BlockDeleted, protocol.BlockDiscarded,
	protocol.BlockRetiring, protocol.BlockClaimed, protocol.BlockPending, protocol.BlockRejected}

func (r *run) report() {
	w := r.out
	for _, ts := range r.sum.Tenants {
		fmt.Fprintf(w, "\nTENANT %s (replication factor %d)\n", ts.Tenant, ts.ReplicationFactor)
		fmt.Fprintf(w, "  %-13s  %d × 2h (level 0)\n", "blocks before", ts.Uploaded)
		var levels []int
		for l := range ts.After {
			levels = append(levels, l)
		}
		sort.Ints(levels)
		first := true
		for _, l := range levels {
			var parts []string
			for _, s := range afterStates {
				if n := ts.After[l][s]; n > 0 {
					parts = append(parts, fmt.Sprintf("%d %s", n, s))
				}
			}
			label := ""
			if first {
				label = "blocks after"
				first = false
			}
			fmt.Fprintf(w, "  %-13s  level %d%s: %s\n", label, l, levelRange(r, l), strings.Join(parts, ", "))
		}
		for _, lb := range ts.Live {
			fmt.Fprintf(w, "  %-13s  live %s  L%d  %s  %d series, %s samples\n", "", lb.ID, lb.Level,
				rangeText(lb.MinT, lb.MaxT), lb.Series, cli.HumanCount(lb.Samples))
		}
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		again := false
		for i, g := range ts.Groups {
			label := ""
			if i == 0 {
				label = "groups run"
			}
			fmt.Fprintf(tw, "  %-13s\tL%d %s\t%s\t%s\t%d sources\t%s\n", label, g.Level, rangeText(g.RangeStart, g.RangeEnd),
				versionsText(g), partitionsText(g.Partitions), g.Sources, g.State)
			if g.Versions > 1 {
				again = true
			}
		}
		tw.Flush()
		fmt.Fprintf(w, "  %-13s  %d group(s), %d version(s), %d partition job(s)\n", "", len(ts.Groups), ts.Versions, ts.Partitions)
		if again {
			fmt.Fprintf(w, "  %-13s  (a group runs a new version over its output when blocks arrive after it was\n"+
				"  %-13s   planned — here the late replicas — merging them vertically, duplicates once)\n", "", "")
		}
		verdict := "ok (I2 no double coverage, I3 no dangling files, I4 no orphans)"
		if ts.Violations > 0 {
			verdict = fmt.Sprintf("FAILED: %d violation(s)", ts.Violations)
		}
		fmt.Fprintf(w, "  %-13s  %s\n", "sluice verify", verdict)
		if r.thanos {
			fmt.Fprintf(w, "  %-13s  %s\n", "thanos verify", r.sum.ThanosVerdict)
		}
		m := ts.Metrics
		fmt.Fprintf(w, "  %-13s  %s compaction(s) and %s read, from %d EMF record(s) in the handlers' log;\n"+
			"  %-13s  sluice metrics: %s overdue, %d partition(s) planned, %d quarantined\n",
			"metrics", commas(uint64(m.Compactions)), bytesize.IEC(int64(m.BytesRead)), m.Records,
			"", m.Figures.OldestUncompacted.Round(time.Second), m.Figures.Planned, m.Figures.QuarantinedBlocks+m.Figures.QuarantinedGroups)
		e := ts.Equivalence
		if e.OK() {
			fmt.Fprintf(w, "  %-13s  ok: the live blocks hold exactly the %s distinct samples of %d series uploaded\n"+
				"  %-13s  (%d missing, %d extra, %d duplicated)\n",
				"equivalence", commas(e.InputSamples), e.InputSeries, "", e.Missing, e.Extra, e.DuplicatedInOutputs)
		} else {
			fmt.Fprintf(w, "  %-13s  FAILED: %s\n", "equivalence", strings.ReplaceAll(e.String(), "\n", "\n                 "))
		}
	}
	if rr := r.sum.Retention; rr != nil {
		fmt.Fprintf(w, "\nTENANT %s (retention %dd, from the runtime overrides)\n", rr.Tenant, int(rr.Retention.Hours()/24))
		fmt.Fprintf(w, "  %-13s  %d × 2h (level 0), ending %d days before the others\n", "blocks before", rr.Uploaded, int(archiveAge.Hours()/24))
		fmt.Fprintf(w, "  %-13s  %d expired by retention's own schedule, marked, then deleted (%d with a deletion mark first)\n",
			"blocks after", rr.Deleted, rr.Marked)
	}
	if r.sum.Verify != nil && !r.sum.Verify.OK() {
		fmt.Fprintln(w)
		r.sum.Verify.Render(w)
	}

	tenants := len(r.sum.Tenants)
	if r.sum.Retention != nil {
		tenants++
	}
	fmt.Fprintf(w, "\nAWS REQUESTS (%d tenants together)\n", tenants)
	width := len("total")
	for _, q := range r.sum.Requests {
		width = max(width, len(q.Operation))
	}
	row := func(op string, a, b, c, d any) {
		fmt.Fprintf(w, "  %-*s %8v %9v %7v %7v\n", width, op, a, b, c, d)
	}
	row("", "upload", "pipeline", "checks", "total")
	var tot Request
	for _, q := range r.sum.Requests {
		row(q.Operation, q.Upload, q.Pipeline, q.Checks, q.Total())
		tot.Upload += q.Upload
		tot.Pipeline += q.Pipeline
		tot.Checks += q.Checks
	}
	row("total", tot.Upload, tot.Pipeline, tot.Checks, tot.Total())
	lists, wide := 0, 0
	for _, q := range r.sum.Requests {
		switch {
		case strings.HasSuffix(q.Operation, awsenv.WiderThanABlock):
			wide += q.Pipeline
		case strings.HasPrefix(q.Operation, "S3 List"):
			lists += q.Pipeline
		}
	}
	polling := 0
	for _, q := range r.sum.Requests {
		switch q.Operation {
		case "SQS ReceiveMessage", "SQS DeleteMessageBatch", "SQS GetQueueAttributes", "SQS GetQueueUrl":
			polling += q.Pipeline
		}
	}
	if r.sum.Uploaded > 0 {
		scope := "each of one block's own prefix: Sluice lists neither a tenant nor the bucket"
		if wide > 0 {
			scope = fmt.Sprintf("%d of them wider than one block", wide)
		}
		fmt.Fprintf(w, "  pipeline: %d requests by the handlers (%.1f per uploaded block) and %d by the event-source\n"+
			"  polling (Lambda's, in AWS); %d S3 LIST (%s)\n",
			tot.Pipeline-polling, float64(tot.Pipeline-polling)/float64(r.sum.Uploaded), polling, lists, scope)
		var parts []string
		for _, c := range r.sum.ByCaller {
			parts = append(parts, fmt.Sprintf("%s %.1f", c.Caller, float64(c.Requests)/float64(r.sum.Uploaded)))
		}
		fmt.Fprintf(w, "  per uploaded block, by caller: %s\n", strings.Join(parts, ", "))
		for _, c := range r.sum.ByCaller {
			if len(c.Operations) == 0 {
				continue
			}
			var ops []string
			for _, op := range slices.Sorted(maps.Keys(c.Operations)) {
				ops = append(ops, fmt.Sprintf("%s %.1f", op, float64(c.Operations[op])/float64(r.sum.Uploaded)))
			}
			fmt.Fprintf(w, "    %s: %s\n", c.Caller, strings.Join(ops, ", "))
		}
	}
}

// result is the demo's last step: every check of both deployments.
func (r *run) result() {
	fmt.Fprintln(r.out)
	if r.sum.OK() {
		r.stepf("result", "ALL CHECKS PASSED in %s", r.sum.Elapsed.Round(100*time.Millisecond))
		for _, l := range statusPageLines(r.sum, r.opts.EnvFile) {
			r.detailf("%s", l)
		}
	} else {
		r.stepf("result", "FAILED after %s:", r.sum.Elapsed.Round(100*time.Millisecond))
		for _, f := range r.sum.Failures {
			r.detailf("- %s", f)
		}
	}
}

func levelRange(r *run, l int) string {
	if l == 0 {
		return " (2h uploads)"
	}
	if l <= r.cfg.Policy.TopLevel() {
		return fmt.Sprintf(" (%s)", strings.TrimSuffix(strings.TrimSuffix(r.cfg.Policy.Range(l).String(), "0s"), "0m"))
	}
	return ""
}

func versionsText(g GroupRun) string {
	if g.Versions == 1 {
		return "v1"
	}
	return fmt.Sprintf("v1..v%d", g.Versions)
}

func partitionsText(ps []int) string {
	var parts []string
	for _, p := range ps {
		parts = append(parts, fmt.Sprint(p))
	}
	s := strings.Join(parts, "+")
	if len(ps) == 1 && ps[0] == 1 {
		return s + " partition"
	}
	return s + " partitions"
}

// commas renders 1234567 as 1,234,567.
func commas(n uint64) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// rangeText renders [from, to) as "2024-01-01 00:00 → 12:00", with the
// end's date when it differs.
func rangeText(from, to int64) string {
	a, b := cli.MsTime(from), cli.MsTime(to)
	if a[:10] == b[:10] {
		return a + " → " + b[11:]
	}
	return a + " → " + b
}
