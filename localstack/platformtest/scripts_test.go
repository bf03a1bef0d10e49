package platformtest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/localstack/envtest"
)

// TestStartStopLeaveNothingBehind runs the scripts as `make up` / `make
// down` do, on a spare port so the shared emulator is not touched: start
// answers, a second start is harmless, --check and --reset work, and stop
// ends the server and frees the port, leaving no process behind.
func TestStartStopLeaveNothingBehind(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an emulator: skipped with -short")
	}
	if err := exec.Command("python3", "-c", "import moto").Run(); err != nil {
		if os.Getenv("SLUICE_REQUIRE_EMULATOR") == "1" {
			t.Fatalf("python3 cannot import moto: %v", err)
		}
		t.Skipf("python3 cannot import moto: %v", err)
	}
	t.Parallel()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	port := sparePort(t)
	url := fmt.Sprintf("http://127.0.0.1:%d", port)
	pidfile := filepath.Join(root, ".sluice", fmt.Sprintf("emulator-%d.pid", port))
	script := func(name string, args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, "bash", append([]string{filepath.Join(root, "localstack", name)}, args...)...)
		cmd.Env = append(os.Environ(), "SLUICE_EMULATOR_PORT="+strconv.Itoa(port), "SLUICE_EMULATOR=moto")
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		return out.String(), err
	}
	t.Cleanup(func() {
		_, _ = script("stop.sh") // whatever happened above
		for _, ext := range []string{"lock", "log"} {
			_ = os.Remove(filepath.Join(root, ".sluice", fmt.Sprintf("emulator-%d.%s", port, ext)))
		}
	})

	if _, err := script("start.sh", "--check"); err == nil {
		t.Fatalf("--check answered on spare port %d before any start", port)
	}
	out, err := script("start.sh")
	if err != nil {
		t.Fatalf("start.sh: %v\n%s", err, out)
	}
	pid := readPid(t, pidfile)
	if !envtest.Answers(t.Context(), url, 2*time.Second) {
		t.Fatalf("nothing answers on %s after start.sh:\n%s", url, out)
	}
	if out, err := script("start.sh", "--check"); err != nil {
		t.Errorf("--check after start: %v\n%s", err, out)
	}

	out, err = script("start.sh")
	if err != nil || !strings.Contains(out, "already running") {
		t.Errorf("second start.sh: %v\n%s", err, out)
	}
	if again := readPid(t, pidfile); again != pid {
		t.Errorf("second start.sh replaced server %d by %d", pid, again)
	}
	if out, err := script("start.sh", "--reset"); err != nil || !strings.Contains(out, "reset moto") {
		t.Errorf("start.sh --reset: %v\n%s", err, out)
	}

	out, err = script("stop.sh")
	if err != nil {
		t.Fatalf("stop.sh: %v\n%s", err, out)
	}
	if envtest.Answers(t.Context(), url, time.Second) {
		t.Errorf("%s still answers after stop.sh", url)
	}
	if _, err := script("start.sh", "--check"); err == nil {
		t.Error("--check succeeds after stop.sh")
	}
	if alive(pid) {
		t.Errorf("server %d still runs after stop.sh", pid)
	}
	if left := serversOn(port); len(left) > 0 {
		t.Errorf("processes left serving port %d: %v", port, left)
	}
	if _, err := os.Stat(pidfile); !os.IsNotExist(err) {
		t.Errorf("pidfile %s left behind (%v)", pidfile, err)
	}
	if out, err := script("stop.sh"); err != nil {
		t.Errorf("a second stop.sh failed: %v\n%s", err, out)
	}
}

// sparePort returns a port nothing listens on right now.
func sparePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func readPid(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("pidfile: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("pidfile %s: %v", path, err)
	}
	return pid
}

// alive reports whether pid runs; a zombie (exited, not yet reaped by
// init) does not count.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// serversOn lists live processes whose command line runs moto_serial.py on
// port.
func serversOn(port int) []string {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	var out []string
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		cmd := strings.ReplaceAll(string(b), "\x00", " ")
		if strings.Contains(cmd, "moto_serial.py") && strings.Contains(cmd, "-p "+strconv.Itoa(port)+" ") {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
			if alive(pid) {
				out = append(out, cmd)
			}
		}
	}
	return out
}
