// Package ui_test loads the status page ('sluice ui', 'sluice status
// --html') in a real headless browser, as an operator would: over a
// pipeline that ran, it must load without a console error, draw every
// block where its time range is, and show a group's partitions when the
// group is clicked.
//
// Chromium comes from Debian's packages (scripts/test.sh installs it when
// missing); SLUICE_CHROMIUM names another binary. Without one the test is
// skipped, unless SLUICE_REQUIRE_BROWSER=1 (make test sets it).
// SLUICE_UI_SCREENSHOT=file.png saves what the browser shows.
package ui_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/sluice-dev/sluice/shared/blockgen"
	"github.com/sluice-dev/sluice/shared/cli"
	"github.com/sluice-dev/sluice/shared/config"
	"github.com/sluice-dev/sluice/shared/protocol"
	"github.com/sluice-dev/sluice/shared/records"
	"github.com/sluice-dev/sluice/tests/testworld"
)

func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("SLUICE_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("SLUICE_REQUIRE_BROWSER") == "1" {
		t.Fatal("no Chromium found (SLUICE_REQUIRE_BROWSER=1): apt-get install chromium, or set SLUICE_CHROMIUM")
	}
	t.Skip("no Chromium found: apt-get install chromium, or set SLUICE_CHROMIUM")
	return ""
}

func day() time.Time { return time.Now().UTC().Truncate(24 * time.Hour).Add(-48 * time.Hour) }

// rectInfo is what the browser reports of one block's bar.
type rectInfo struct {
	ID     string  `json:"id"`
	Level  int     `json:"level"`
	State  string  `json:"state"`
	Min    int64   `json:"min"`
	Max    int64   `json:"max"`
	X      float64 `json:"x"`
	W      float64 `json:"w"`
	Tenant string  `json:"tenant"`
}

func TestStatusPageInABrowser(t *testing.T) {
	exe := chromium(t)
	w := testworld.New(t, testworld.Options{Configure: func(c *config.Config) {
		c.Policy.Ranges = []time.Duration{12 * time.Hour}
		c.Policy.MaxSeriesPerPartition = 20 // acme's half day: 4 partitions
		c.Policy.CloseDelay = time.Hour     // beta's range waits
	}})
	ctx := context.Background()
	for _, b := range w.Generate(blockgen.Options{Tenant: "acme", Start: day(), Blocks: 6, Series: 30, Seed: 91, ThanosFiles: true}) {
		w.Upload(ctx, "acme", b.Dir)
	}
	for _, b := range w.Generate(blockgen.Options{Tenant: "beta", Start: day(), Blocks: 3, Series: 10, Seed: 92, ThanosFiles: true}) {
		w.Upload(ctx, "beta", b.Dir)
	}
	if err := w.Pipeline.Settle(ctx, 2*time.Second, 10*time.Minute, func(ctx context.Context) (bool, error) {
		return w.Quiescent(ctx, "acme", "beta")
	}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(cli.StatusPage(func(ctx context.Context) (*cli.StatusReport, error) {
		return cli.GatherStatus(ctx, w.Store, w.Env.Clients.SQS, w.Config, cli.StatusOptions{Detail: true})
	}))
	defer srv.Close()

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(exe), chromedp.NoSandbox,
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.WindowSize(1280, 1000))
	actx, cancel := chromedp.NewExecAllocator(ctx, opts...)
	defer cancel()
	bctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	bctx, cancel = context.WithTimeout(bctx, 2*time.Minute)
	defer cancel()
	var mu sync.Mutex
	var problems []string
	if err := chromedp.Listen(bctx, func(ev any) {
		mu.Lock()
		defer mu.Unlock()
		switch e := ev.(type) {
		case *runtime.EventConsoleAPICalled:
			if e.Type == runtime.ConsoleAPICalledTypeError || e.Type == runtime.ConsoleAPICalledTypeWarning {
				problems = append(problems, fmt.Sprintf("console %s: %v", e.Type, e.Args))
			}
		case *runtime.EventExceptionThrown:
			problems = append(problems, (&chromedp.ExceptionError{ExceptionDetails: e.ExceptionDetails}).Error())
		case *log.EventEntryAdded:
			if e.Entry.Level == log.EntryLevelError || e.Entry.Level == log.EntryLevelWarning {
				problems = append(problems, fmt.Sprintf("log %s (%s): %s %s", e.Entry.Level, e.Entry.Source, e.Entry.Text, e.Entry.URL))
			}
		}
	}); err != nil {
		t.Fatal(err)
	}

	if err := chromedp.Do(bctx, chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(chromedp.CSS("svg.timeline"))); err != nil {
		t.Fatal(err)
	}
	rectsJSON, err := chromedp.Run(bctx, chromedp.Evaluate[string](`JSON.stringify([...document.querySelectorAll('section.tenant rect.block')].map(r => {
		const b = r.getBBox();
		return {id: r.dataset.block, level: +r.dataset.level, state: r.dataset.state, min: +r.dataset.min, max: +r.dataset.max,
			x: b.x, w: b.width, tenant: r.closest('section.tenant').id.replace('tenant-', '')};
	}))`))
	if err != nil {
		t.Fatal(err)
	}
	// The axis: each tenant's ticks, where the browser drew them and the
	// time each marks.
	axesJSON, err := chromedp.Run(bctx, chromedp.Evaluate[string](`JSON.stringify(Object.fromEntries([...document.querySelectorAll('section.tenant')].map(s =>
		[s.id.replace('tenant-', ''), [...s.querySelectorAll('line.tick')].map(l => ({x: l.x1.baseVal.value, t: +l.dataset.t}))])))`))
	if err != nil {
		t.Fatal(err)
	}
	var axes map[string][]struct {
		X float64 `json:"x"`
		T int64   `json:"t"`
	}
	if err := json.Unmarshal([]byte(axesJSON), &axes); err != nil {
		t.Fatal(err)
	}
	closedVisible, err := chromedp.Run(bctx, chromedp.Evaluate[bool](`document.querySelector('#tenant-acme details.group table.partitions').checkVisibility()`))
	if err != nil {
		t.Fatal(err)
	}
	var rects []rectInfo
	if err := json.Unmarshal([]byte(rectsJSON), &rects); err != nil {
		t.Fatal(err)
	}

	// Every block a reader may see is drawn over its own range on its
	// tenant's axis (where the axis' ticks put its minTime and maxTime), at
	// its level, in its state.
	byID := map[string]rectInfo{}
	for _, r := range rects {
		byID[r.ID] = r
	}
	shown := 0
	for _, tenant := range []string{"acme", "beta"} {
		for _, b := range w.Blocks(ctx, tenant) {
			if b.State == protocol.BlockDeleted || b.State == protocol.BlockDiscarded {
				if _, drawn := byID[b.ID]; drawn {
					t.Errorf("%s: deleted block %s is drawn", tenant, b.ID)
				}
				continue
			}
			r, ok := byID[b.ID]
			if !ok {
				t.Errorf("%s: block %s (%s, L%d) is not on the timeline", tenant, b.ID, b.State, b.Level)
				continue
			}
			if r.Tenant != tenant || r.Level != b.Level || r.State != string(b.State) || r.Min != b.MinT || r.Max != b.MaxT {
				t.Errorf("%s: block %s drawn as %+v; the record says L%d %s [%d, %d)", tenant, b.ID, r, b.Level, b.State, b.MinT, b.MaxT)
			}
			ticks := axes[tenant]
			if len(ticks) < 2 {
				t.Fatalf("%s: %d ticks on the axis", tenant, len(ticks))
			}
			first, last := ticks[0], ticks[len(ticks)-1]
			at := func(ms int64) float64 {
				return first.X + (last.X-first.X)*float64(ms-first.T)/float64(last.T-first.T)
			}
			if math.Abs(r.X-at(b.MinT)) > 1.5 || math.Abs(r.X+r.W+1-at(b.MaxT)) > 1.5 {
				t.Errorf("%s: block %s [%d, %d) drawn over x %.1f–%.1f; the axis puts it at %.1f–%.1f",
					tenant, b.ID, b.MinT, b.MaxT, r.X, r.X+r.W+1, at(b.MinT), at(b.MaxT))
			}
			shown++
		}
	}
	if shown < 5 {
		t.Fatalf("%d blocks drawn; the scenario leaves acme's 4 partitions and beta's 3 uploads", shown)
	}
	if closedVisible {
		t.Error("a group's partitions show before it is clicked")
	}

	// Why a range waits: beta's half day, not covered yet, is listed once;
	// acme's, compacted already, is not listed at all.
	waitingJSON, err := chromedp.Run(bctx, chromedp.Evaluate[string](`JSON.stringify(Object.fromEntries([...document.querySelectorAll('section.tenant')].map(s =>
		[s.id.replace('tenant-', ''), [...s.querySelectorAll('tr.waiting')].map(r => r.dataset.group)])))`))
	if err != nil {
		t.Fatal(err)
	}
	var waiting map[string][]string
	if err := json.Unmarshal([]byte(waitingJSON), &waiting); err != nil {
		t.Fatal(err)
	}
	if len(waiting["acme"]) != 0 || len(waiting["beta"]) != 1 {
		t.Errorf("ranges waiting %v; want beta's half day once and nothing of acme's", waiting)
	}

	// Clicking acme's group opens its partitions.
	head := acmeGroup(t, w)
	sel := fmt.Sprintf(`details.group[data-group=%q]`, head.Key.String())
	q := strings.ReplaceAll(sel, `'`, `\'`)
	if err := chromedp.Do(bctx, chromedp.Click(chromedp.CSS(sel+" > summary")), chromedp.WaitVisible(chromedp.CSS(sel+" table.partitions"))); err != nil {
		t.Fatal(err)
	}
	opened, err := chromedp.Run(bctx, chromedp.Evaluate[bool](fmt.Sprintf(`document.querySelector('%s').open`, q)))
	if err != nil {
		t.Fatal(err)
	}
	rows, err := chromedp.Run(bctx, chromedp.Evaluate[int](fmt.Sprintf(`document.querySelectorAll('%s table.partitions tr').length - 1`, q)))
	if err != nil {
		t.Fatal(err)
	}
	if !opened || rows != head.Partitions {
		t.Errorf("after a click group %s is open %v with %d partition rows; want open with %d", head.Key, opened, rows, head.Partitions)
	}
	if path := os.Getenv("SLUICE_UI_SCREENSHOT"); path != "" {
		png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(problems) > 0 {
		t.Errorf("the browser reported:\n%s", strings.Join(problems, "\n"))
	}
}

// acmeGroup is acme's half-day group, which compacted in partitions.
func acmeGroup(t *testing.T, w *testworld.World) records.Group {
	t.Helper()
	groups, err := w.Store.TenantGroups(context.Background(), "acme")
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range groups {
		if g.Key.Level == 1 && g.Partitions > 1 {
			return g
		}
	}
	t.Fatalf("acme has no partitioned group: %v", groups)
	return records.Group{}
}
