package cli

import (
	"fmt"
	"io"
	"log/slog"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluice-dev/sluice/shared/overrides"
	"github.com/sluice-dev/sluice/shared/protocol"
)

// maxFinishedGroups is how many finished groups status lists before it
// summarises them (--all lists every one).
const maxFinishedGroups = 12

// Render writes the report as tables a person reads at a glance.
func (r *StatusReport) Render(w io.Writer, allGroups bool) {
	fmt.Fprintf(w, "Sluice status at %s — bucket %s, table %s\n", r.At.Format("2006-01-02 15:04:05 UTC"), r.Bucket, r.Table)
	if r.OverridesError != "" {
		fmt.Fprintf(w, "runtime overrides NOT in force (the functions keep the last good ones): %s\n", r.OverridesError)
	}
	if len(r.Tenants) == 0 {
		fmt.Fprintln(w, "\nNo tenant has uploaded a block yet ('sluice upload --tenant T DIR...').")
	}
	for _, t := range r.Tenants {
		fmt.Fprintln(w)
		t.render(w, r.At, allGroups)
	}
	fmt.Fprintln(w)
	renderQueues(w, r.Queues, r.QueuesNote)
}

func (t TenantStatus) render(w io.Writer, now time.Time, allGroups bool) {
	fmt.Fprintf(w, "TENANT %s — %d live block(s), %s samples\n", t.Tenant, t.LiveBlocks, humanCount(t.LiveSamples))
	if len(t.Blocks) == 0 {
		fmt.Fprintln(w, "  no blocks")
	} else {
		present := map[string]bool{string(protocol.BlockLive): true}
		for _, l := range t.Blocks {
			for s, n := range l.States {
				if n > 0 {
					present[s] = true
				}
			}
		}
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		row := []string{"  BLOCKS"}
		for _, s := range blockStates {
			if present[string(s)] {
				row = append(row, string(s))
			}
		}
		fmt.Fprintln(tw, strings.Join(row, "\t"))
		for _, l := range t.Blocks {
			name := fmt.Sprintf("level %d", l.Level)
			switch {
			case l.Level == 0:
				name += " (uploads)"
			case l.Range != "":
				name += " (" + l.Range + ")"
			}
			row := []string{"  " + name}
			for _, s := range blockStates {
				if present[string(s)] {
					row = append(row, dash(l.States[string(s)]))
				}
			}
			fmt.Fprintln(tw, strings.Join(row, "\t"))
		}
		tw.Flush()
	}

	// Streams are worth a table when there is more than one, or when the
	// one has labels; a group is then named with its stream.
	withStreams := len(t.Streams) > 1 || (len(t.Streams) == 1 && t.Streams[0].Labels != "{}")
	if withStreams {
		fmt.Fprintln(w)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  STREAM\tID\tLIVE BLOCKS\tSAMPLES")
		for _, s := range t.Streams {
			fmt.Fprintf(tw, "  %s\t%s\t%d\t%s\n", s.Labels, s.ID, s.LiveBlocks, humanCount(s.LiveSamples))
		}
		tw.Flush()
	}

	var shown, finished []GroupStatus
	counts := map[string]int{}
	for _, g := range t.Groups {
		if protocol.GroupState(g.State).Unfinished() {
			shown = append(shown, g)
		} else {
			finished = append(finished, g)
			counts[g.State]++
		}
	}
	if allGroups || len(finished) <= maxFinishedGroups {
		shown, finished = append(shown, finished...), nil
	}
	if len(t.Groups) == 0 {
		fmt.Fprintln(w, "  no groups planned yet")
	} else {
		fmt.Fprintln(w)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  GROUP\tRANGE\tVERSION\tSTATE\tPARTITIONS\tSOURCES\tUPDATED")
		for _, g := range shown {
			name := fmt.Sprintf("L%d", g.Level)
			if g.Split != "" {
				name = "split " + g.Split
			}
			if g.Downsample != "" {
				name = "downsample " + g.Downsample + " to " + g.To
			}
			if withStreams {
				name += " " + g.Stream
			}
			fmt.Fprintf(tw, "  %s\t%s\tv%d\t%s\t%s\t%d\t%s ago\n", name, groupRange(g), g.Version, g.State,
				partitionProgress(g), g.Sources, humanDuration(now.Sub(time.UnixMilli(g.Updated))))
		}
		tw.Flush()
		if len(finished) > 0 {
			var parts []string
			for _, s := range sortedKeys(counts) {
				parts = append(parts, fmt.Sprintf("%d %s", counts[s], s))
			}
			fmt.Fprintf(w, "  … and %d finished group(s) (%s); --all lists them\n", len(finished), strings.Join(parts, ", "))
		}
	}
	if len(t.Leases) == 0 {
		fmt.Fprintln(w, "  leases: none held")
	} else {
		fmt.Fprintln(w)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  LEASE\tOWNER\tATTEMPT\tEXPIRES")
		for _, l := range t.Leases {
			exp := "in " + humanDuration(time.Duration(l.ExpiresInSeconds)*time.Second)
			if l.ExpiresInSeconds < 0 {
				exp = "EXPIRED " + humanDuration(time.Duration(-l.ExpiresInSeconds)*time.Second) + " ago (a retry takes it over)"
			}
			fmt.Fprintf(tw, "  %s@v%d/p%d\t%s\t%d\t%s\n", l.Group, l.Version, l.Partition, l.Owner, l.Attempt, exp)
		}
		tw.Flush()
	}
	for _, g := range t.Groups {
		if protocol.GroupState(g.State).Unfinished() && g.Failures > 0 {
			fmt.Fprintf(w, "  L%d %s v%d: %d failed attempt(s), last: %s\n", g.Level, groupRange(g), g.Version, g.Failures, short(g.LastError))
		}
	}
	if len(t.Quarantined) > 0 {
		fmt.Fprintf(w, "  quarantined (never compacted; fix, then 'sluice retry --tenant %s BLOCK|GROUP'):\n", t.Tenant)
		for _, q := range t.Quarantined {
			what := q.Block
			if what == "" {
				what = "group " + q.Group
			}
			fmt.Fprintf(w, "    %s: %s\n", what, short(q.Reason))
		}
	}
	if len(t.Overrides) > 0 {
		fmt.Fprintf(w, "  overrides (%s): %s\n", overrides.File, strings.Join(t.Overrides, ", "))
	}
	if r := t.Retention; r != nil {
		fmt.Fprintf(w, "  retention (%s\n", strings.Replace(r.line(), ": ", "): ", 1))
	}
	for _, n := range t.Notes {
		fmt.Fprintf(w, "  note: %s\n", n)
	}
	if len(t.Rejected) > 0 {
		fmt.Fprintf(w, "  rejected (never compacted; fix and re-upload under a new ULID):\n")
		for _, r := range t.Rejected {
			fmt.Fprintf(w, "    %s: %s\n", r.Block, r.Reason)
		}
	}
}

func renderQueues(w io.Writer, qs []QueueStatus, note string) {
	if len(qs) == 0 {
		fmt.Fprintf(w, "QUEUES: %s\n", note)
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "QUEUE\tWAITING\tIN FLIGHT\tDEAD LETTERS\tOLDEST DEAD LETTER")
	dead := 0
	for _, q := range qs {
		if q.Error != "" {
			fmt.Fprintf(tw, "%s\t?\t?\t?\t%s\n", q.Queue, q.Error)
			continue
		}
		oldest := "-"
		if q.DLQOldestSeconds >= 0 {
			oldest = "<1s old"
			if q.DLQOldestSeconds > 0 {
				oldest = humanDuration(time.Duration(q.DLQOldestSeconds)*time.Second) + " old"
			}
		}
		dl := fmt.Sprint(q.DLQDepth)
		if q.DLQ == "" {
			dl = "no DLQ"
		}
		dead += q.DLQDepth
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\n", q.Queue, q.Waiting, q.InFlight, dl, oldest)
	}
	tw.Flush()
	if note != "" {
		fmt.Fprintf(w, "(%s)\n", note)
	}
	if dead > 0 {
		fmt.Fprintln(w, "Dead letters failed five times each; read the logs, fix the cause, then 'sluice replay-dlq QUEUE'.")
	}
}

func groupRange(g GroupStatus) string {
	if g.RangeEnd == 0 {
		return msTime(g.RangeStart) + " →"
	}
	end := msTime(g.RangeEnd)
	if msTime(g.RangeStart)[:10] == end[:10] {
		end = end[11:]
	}
	return msTime(g.RangeStart) + " → " + end
}

func partitionProgress(g GroupStatus) string {
	if !g.PartitionsRead {
		return fmt.Sprintf("%d", g.Partitions)
	}
	s := fmt.Sprintf("%d/%d done", g.Done, g.Partitions)
	if g.Running > 0 {
		s += fmt.Sprintf(", %d running", g.Running)
	}
	return s
}

func dash(n int) string {
	if n == 0 {
		return "-"
	}
	return fmt.Sprint(n)
}

// humanCount renders 1234567 as 1.2M.
func humanCount(n uint64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.1fG", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.1fM", float64(n)/1e6)
	case n >= 1e4:
		return fmt.Sprintf("%.1fk", float64(n)/1e3)
	}
	return fmt.Sprint(n)
}

// quietLogger drops the store's debug logs: the CLI reports, it does not log.
func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// short folds s into one line of at most 300 characters.
func short(s string) string {
	s = oneLine(s)
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}
