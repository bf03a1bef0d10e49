package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/shared/blockgen"
	"github.com/sluice-dev/sluice/shared/protocol"
)

// TestRunUntilIdle: blocks uploaded with 'sluice upload' are compacted by
// 'sluice run --until-idle' alone — no demo, no Go — which stops once
// nothing is left to do, says what waits, and leaves the handlers' logs
// in --log. With the default upload wait, a covered range waits for its
// uploads' replicas and the run says until when; with none (as
// 'sluice-local provision' sets it) it is compacted at once.
func TestRunUntilIdle(t *testing.T) {
	w := newWorld(t)
	w.vars["SLUICE_DELETION_DELAY"] = "1h"
	dirs := gen(t, blockgen.Options{Tenant: "run", Blocks: 6})
	w.run(append([]string{"upload", "--quiet", "--tenant", "team-w"}, dirs...)...).wantCode(t, 0)
	logFile := filepath.Join(t.TempDir(), "run.log")
	r := w.run("run", "--until-idle", "--sweep-every", "1s", "--log", logFile)
	r.wantCode(t, 0)
	if !strings.Contains(r.stdout, "team-w: a range") || !strings.Contains(r.stdout, "SLUICE_UPLOAD_WAIT") {
		t.Errorf("run with the default upload wait does not say the range waits for its replicas:\n%s", r.stdout)
	}
	if groups, err := w.store.TenantGroups(t.Context(), "team-w"); err != nil || len(groups) != 0 {
		t.Fatalf("groups planned within the upload wait (%v): %+v", err, groups)
	}

	w.vars["SLUICE_UPLOAD_WAIT"] = "0"
	w.run(append([]string{"upload", "--quiet", "--tenant", "team-r"}, dirs...)...).wantCode(t, 0)
	r = w.run("run", "--until-idle", "--sweep-every", "1s", "--log", logFile)
	r.wantCode(t, 0)
	for _, want := range []string{"sluice run: nothing is left to do now", "planner", "compact", "uploader",
		"waiting: team-r: 6 compacted source(s) to delete after the deletion delay"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("run output lacks %q:\n%s", want, r.stdout)
		}
	}
	logs, err := os.ReadFile(logFile)
	if err != nil || !strings.Contains(string(logs), `"msg":"block registered"`) || !strings.Contains(string(logs), `"msg":"partition committed"`) {
		t.Errorf("the handlers' logs (%v) lack their JSON lines:\n%.2000s", err, logs)
	}
	groups, err := w.store.TenantGroups(t.Context(), "team-r")
	if err != nil {
		t.Fatal(err)
	}
	retired := 0
	for _, g := range groups {
		if g.State == protocol.GroupRetired {
			retired++
		}
	}
	if retired == 0 {
		t.Fatalf("no version retired after the run: %+v", groups)
	}
	w.run("verify").wantCode(t, 0)
}

// TestRunRefusesAWSUnlessAsked: without an endpoint, run would compete
// with the deployed functions in AWS; it says so and stops, unless
// --against-aws.
func TestRunRefusesAWSUnlessAsked(t *testing.T) {
	vars := map[string]string{"SLUICE_BUCKET": "b", "SLUICE_TABLE": "t"}
	r := runWith(t, vars, "run", "--until-idle")
	r.wantCode(t, 1)
	r.wantOneLineError(t, "sluice run", "against AWS", "--against-aws")
}
