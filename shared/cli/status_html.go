package cli

import (
	_ "embed"
	"fmt"
	"html/template"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/shared/protocol"
)

// The status page: one self-contained HTML page (no script, no external
// resource) of a StatusReport read with StatusOptions.Detail, which
// `sluice ui` serves and `sluice status --html` writes.

//go:embed statuspage.html
var statusPageHTML string

var statusPage = template.Must(template.New("status").Parse(statusPageHTML))

// RenderHTML writes the status page of rep. live says the page is served
// (a reload reads the records again), not a snapshot.
func (r *StatusReport) RenderHTML(w io.Writer, live bool) error {
	return statusPage.Execute(w, r.pageView(live))
}

// The page's view of the report: what the template shows, laid out.
type pageView struct {
	Bucket, Table, At, OverridesError, QueuesNote string
	Live                                          bool
	Tenants                                       []tenantView
	Queues                                        []queueView
}

type tenantView struct {
	Name        string
	LiveBlocks  int
	LiveSamples string
	Overrides   []string
	Notes       []string
	Timeline    timeline
	States      []string
	Levels      []levelView
	Groups      []groupView
	Waiting     []waitingView
	Quarantined []quarantinedView
	Rejected    []RejectedBlock
	Retention   string
}

type levelView struct {
	Level  int
	Range  string
	Counts []string
}

type groupView struct {
	Key, Name, Range, State, Progress, Updated, LastError string
	Version                                               int64
	Sources, Failures                                     int
	Partitions                                            []partitionView
}

type partitionView struct {
	Index                            int
	State, Owner, LeaseUntil, Output string
	Attempt                          int
}

type waitingView struct{ Group, Level, Stream, Range, ClosesAt string }

type quarantinedView struct{ What, Reason string }

type queueView struct {
	Name, Oldest                   string
	Waiting, InFlight, DeadLetters int
}

// pageStates are the block states the levels table counts, in order.
var pageStates = []string{string(protocol.BlockLive), string(protocol.BlockPending), string(protocol.BlockClaimed), string(protocol.BlockRetiring),
	string(protocol.BlockDeleted), string(protocol.BlockDiscarded), string(protocol.BlockQuarantined), string(protocol.BlockRejected)}

func (r *StatusReport) pageView(live bool) pageView {
	v := pageView{Bucket: r.Bucket, Table: r.Table, At: r.At.UTC().Format("2006-01-02 15:04:05 UTC"), OverridesError: r.OverridesError,
		QueuesNote: r.QueuesNote, Live: live}
	for _, t := range r.Tenants {
		v.Tenants = append(v.Tenants, t.view(r.At))
	}
	for _, q := range r.Queues {
		qv := queueView{Name: q.Queue, Waiting: q.Waiting, InFlight: q.InFlight, DeadLetters: q.DLQDepth, Oldest: "-"}
		if q.DLQOldestSeconds >= 0 && q.DLQDepth > 0 {
			qv.Oldest = humanDuration(time.Duration(q.DLQOldestSeconds)*time.Second) + " ago"
		}
		v.Queues = append(v.Queues, qv)
	}
	return v
}

func (t TenantStatus) view(now time.Time) tenantView {
	v := tenantView{Name: t.Tenant, LiveBlocks: t.LiveBlocks, LiveSamples: humanCount(t.LiveSamples), Overrides: t.Overrides,
		Notes: t.Notes, Timeline: layoutTimeline(t.BlockList), States: pageStates, Rejected: t.Rejected}
	for _, l := range t.Blocks {
		lv := levelView{Level: l.Level, Range: l.Range}
		if l.Level == 0 {
			lv.Range = "uploads"
		}
		for _, s := range pageStates {
			lv.Counts = append(lv.Counts, dash(l.States[s]))
		}
		v.Levels = append(v.Levels, lv)
	}
	for _, g := range t.Groups {
		name := fmt.Sprintf("L%d", g.Level)
		if g.Split != "" {
			name = "split " + g.Split
		}
		if g.Downsample != "" {
			name = "downsample " + g.Downsample + " to " + g.To
		}
		gv := groupView{Key: g.Group, Name: name, Range: groupRange(g), State: g.State, Progress: partitionProgress(g),
			Updated: humanDuration(now.Sub(time.UnixMilli(g.Updated))) + " ago", LastError: g.LastError, Version: g.Version,
			Sources: g.Sources, Failures: g.Failures}
		for _, p := range g.PartitionList {
			pv := partitionView{Index: p.Index, State: p.State, Owner: p.Owner, Attempt: p.Attempt, Output: p.Output}
			if p.Empty {
				pv.Output = "(empty: no series hash into it)"
			}
			if p.LeaseUntil > 0 && p.State == string(protocol.PartitionRunning) {
				pv.LeaseUntil = time.UnixMilli(p.LeaseUntil).UTC().Format("15:04:05")
			}
			gv.Partitions = append(gv.Partitions, pv)
		}
		v.Groups = append(v.Groups, gv)
	}
	for _, w := range t.Waiting {
		stream := w.Stream
		if stream == "" {
			stream = "{}"
		}
		v.Waiting = append(v.Waiting, waitingView{Group: w.Group, Level: fmt.Sprintf("L%d", w.Level), Stream: stream,
			Range: groupRange(GroupStatus{RangeStart: w.RangeStart, RangeEnd: w.RangeEnd}), ClosesAt: w.ClosesAt.Format("2006-01-02 15:04 UTC")})
	}
	for _, q := range t.Quarantined {
		what := q.Block
		if what == "" {
			what = "group " + q.Group
		}
		v.Quarantined = append(v.Quarantined, quarantinedView{What: what, Reason: q.Reason})
	}
	if t.Retention != nil {
		v.Retention = t.Retention.line()
	}
	return v
}

// timeline is a tenant's blocks drawn as bars over their time ranges, one
// row per level (uploads first), overlapping blocks (partitions of one
// range, replicas) stacked in lanes.
type timeline struct {
	Width, Height, AxisY int
	From, To             int64 // ms
	Ticks                []tick
	Rows                 []timelineRow
	Bars                 []bar
}

type tick struct {
	X     float64
	T     int64 // ms
	Label string
}

type timelineRow struct {
	Label  string
	LabelY int
}

type bar struct {
	X, Y, W, H       float64
	ID, State, Title string
	Level            int
	MinT, MaxT       int64
	Partition        string
}

// Timeline geometry, in pixels.
const (
	timelineWidth  = 1000
	timelineLabels = 40 // the level labels' column
	laneHeight     = 14
	laneGap        = 2
	rowGap         = 10
	axisHeight     = 18
)

func layoutTimeline(blocks []BlockStatus) timeline {
	tl := timeline{Width: timelineWidth}
	if len(blocks) == 0 {
		return tl
	}
	bs := append([]BlockStatus(nil), blocks...)
	sort.Slice(bs, func(i, j int) bool {
		a, b := bs[i], bs[j]
		if a.Level != b.Level {
			return a.Level < b.Level
		}
		if a.MinT != b.MinT {
			return a.MinT < b.MinT
		}
		if a.PartitionID != b.PartitionID {
			return a.PartitionID < b.PartitionID
		}
		return a.ID < b.ID
	})
	tl.From, tl.To = bs[0].MinT, bs[0].MaxT
	for _, b := range bs {
		tl.From, tl.To = min(tl.From, b.MinT), max(tl.To, b.MaxT)
	}
	span := float64(max(tl.To-tl.From, 1))
	plot := float64(timelineWidth - timelineLabels - 24) // room for the last tick's label
	x := func(t int64) float64 { return float64(timelineLabels) + plot*float64(t-tl.From)/span }
	y := axisHeight + 4
	for i := 0; i < len(bs); {
		level := bs[i].Level
		var lanes []int64 // each lane's end so far
		for ; i < len(bs) && bs[i].Level == level; i++ {
			b := bs[i]
			lane := 0
			for lane < len(lanes) && lanes[lane] > b.MinT {
				lane++
			}
			if lane == len(lanes) {
				lanes = append(lanes, 0)
			}
			lanes[lane] = b.MaxT
			part := ""
			if b.PartitionCount > 1 {
				part = fmt.Sprintf("%d/%d", b.PartitionID, b.PartitionCount)
			}
			title := fmt.Sprintf("%s · L%d · %s · %s → %s · %d series, %s samples", b.ID, b.Level, b.State,
				msTime(b.MinT), msTime(b.MaxT), b.Series, humanCount(b.Samples))
			if part != "" {
				title += " · partition " + part
			}
			tl.Bars = append(tl.Bars, bar{X: x(b.MinT), Y: float64(y + lane*(laneHeight+laneGap)), W: max(x(b.MaxT)-x(b.MinT)-1, 1), H: laneHeight,
				ID: b.ID, State: b.State, Title: title, Level: b.Level, MinT: b.MinT, MaxT: b.MaxT, Partition: part})
		}
		rowHeight := len(lanes)*(laneHeight+laneGap) - laneGap
		label := fmt.Sprintf("L%d", level)
		tl.Rows = append(tl.Rows, timelineRow{Label: label, LabelY: y + min(rowHeight, laneHeight)/2 + 4})
		y += rowHeight + rowGap
	}
	tl.Height = y
	tl.AxisY = 12
	for _, t := range ticks(tl.From, tl.To) {
		tl.Ticks = append(tl.Ticks, tick{X: x(t), T: t, Label: tickLabel(t, tl.To-tl.From)})
	}
	return tl
}

// ticks are the axis' marks: at most about eight, on whole hours or days.
func ticks(from, to int64) []int64 {
	steps := []time.Duration{time.Hour, 2 * time.Hour, 6 * time.Hour, 12 * time.Hour, 24 * time.Hour, 48 * time.Hour, 7 * 24 * time.Hour, 30 * 24 * time.Hour}
	step := steps[len(steps)-1].Milliseconds()
	for _, s := range steps {
		if (to-from)/s.Milliseconds() <= 8 {
			step = s.Milliseconds()
			break
		}
	}
	first := from - from%step
	if first < from {
		first += step
	}
	var out []int64
	for t := first; t <= to; t += step {
		out = append(out, t)
	}
	return out
}

func tickLabel(t, span int64) string {
	tm := time.UnixMilli(t).UTC()
	if span <= (48 * time.Hour).Milliseconds() {
		if tm.Hour() == 0 && tm.Minute() == 0 {
			return tm.Format("Jan 2")
		}
		return tm.Format("15:04")
	}
	return tm.Format("Jan 2")
}

// line is the retention status in one sentence.
func (r *RetentionStatus) line() string {
	var keep []string
	for _, k := range []struct{ res, d string }{{"raw", r.Raw}, {"5m", r.FiveMinutes}, {"1h", r.OneHour}} {
		if k.d != "" {
			keep = append(keep, k.res+" "+k.d)
		}
	}
	s := fmt.Sprintf("%s: %d block(s) past it, retired by the next pass (every %s)", strings.Join(keep, ", "), r.Due, r.Interval)
	if r.Next != nil {
		s += fmt.Sprintf("; next: L%d %s (ends %s), expires %s, deleted %s",
			r.Next.Level, r.Next.Block, r.Next.MaxT.Format(time.RFC3339), r.Next.At.Format(time.RFC3339), r.Next.DeletedAt.Format(time.RFC3339))
	}
	return s
}
