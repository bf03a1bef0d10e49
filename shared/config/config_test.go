package config

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/shared/planning"
)

func env(kv ...string) func(string) string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) string { return m[k] }
}

func TestLoadDefaults(t *testing.T) {
	c, err := Load(env("SLUICE_BUCKET", "b", "SLUICE_TABLE", "t"))
	if err != nil {
		t.Fatal(err)
	}
	if c.DeletionDelay != 48*time.Hour || c.LeaseDuration != 20*time.Minute || c.DownloadParallelism != 8 ||
		len(c.Policy.Ranges) != 2 || c.Policy.MaxPartitions != 64 || c.Layout.SingleTenant != "" {
		t.Fatalf("defaults not applied: %+v", c)
	}
}

func TestLoadRejects(t *testing.T) {
	tests := []struct {
		name string
		env  func(string) string
		want string
	}{
		{"missing bucket and table", env(), "SLUICE_BUCKET is not set; SLUICE_TABLE is not set"},
		{"bad duration", env("SLUICE_BUCKET", "b", "SLUICE_TABLE", "t", "SLUICE_DELETION_DELAY", "soon"), "SLUICE_DELETION_DELAY"},
		{"zero duration", env("SLUICE_BUCKET", "b", "SLUICE_TABLE", "t", "SLUICE_LEASE_DURATION", "0s"), "SLUICE_LEASE_DURATION"},
		{"ranges not multiples", env("SLUICE_BUCKET", "b", "SLUICE_TABLE", "t", "SLUICE_RANGES", "12h,20h"), "not a multiple"},
		{"single tenant without tenant", env("SLUICE_BUCKET", "b", "SLUICE_TABLE", "t", "SLUICE_LAYOUT", "single-tenant"), "SLUICE_TENANT"},
		{"unknown layout", env("SLUICE_BUCKET", "b", "SLUICE_TABLE", "t", "SLUICE_LAYOUT", "flat"), "SLUICE_LAYOUT"},
		{"bad number", env("SLUICE_BUCKET", "b", "SLUICE_TABLE", "t", "SLUICE_MAX_SERIES_PER_PARTITION", "many"), "whole number"},
		{"job timeout within the margin", env("SLUICE_BUCKET", "b", "SLUICE_TABLE", "t", "SLUICE_JOB_TIMEOUT", "30s"), "SLUICE_JOB_TIMEOUT"},
		{"churn out of range", env("SLUICE_BUCKET", "b", "SLUICE_TABLE", "t", "SLUICE_SERIES_CHURN", "1.5"), "SLUICE_SERIES_CHURN"},
		{"split size zero", env("SLUICE_BUCKET", "b", "SLUICE_TABLE", "t", "SLUICE_SPLIT_BYTES", "0"), "SLUICE_SPLIT_BYTES"},
		{"split size not a number", env("SLUICE_BUCKET", "b", "SLUICE_TABLE", "t", "SLUICE_SPLIT_BYTES", "1GiB"), "SLUICE_SPLIT_BYTES"},
		{"bad scratch budget", env("SLUICE_BUCKET", "b", "SLUICE_TABLE", "t", "SLUICE_SCRATCH_BYTES", "8GiB"), "SLUICE_SCRATCH_BYTES"},
		{"job memory below one job's", env("SLUICE_BUCKET", "b", "SLUICE_TABLE", "t", "SLUICE_JOB_MEMORY_BYTES", "268435456"), "SLUICE_JOB_MEMORY_BYTES"},
		{"unknown bucket index", env("SLUICE_BUCKET", "b", "SLUICE_TABLE", "t", "SLUICE_BUCKET_INDEX", "loki"), "SLUICE_BUCKET_INDEX"},
		{"bucket index in a Thanos bucket", env("SLUICE_BUCKET", "b", "SLUICE_TABLE", "t", "SLUICE_LAYOUT", "single-tenant", "SLUICE_TENANT", "x",
			"SLUICE_BUCKET_INDEX", "mimir"), "single-tenant"},
		{"bad retention", env("SLUICE_BUCKET", "b", "SLUICE_TABLE", "t", "SLUICE_RETENTION_5M", "a year"), "SLUICE_RETENTION_5M"},
		{"negative retention", env("SLUICE_BUCKET", "b", "SLUICE_TABLE", "t", "SLUICE_RETENTION", "-3d"), "SLUICE_RETENTION"},
		{"negative upload wait", env("SLUICE_BUCKET", "b", "SLUICE_TABLE", "t", "SLUICE_UPLOAD_WAIT", "-1m"), "SLUICE_UPLOAD_WAIT"},
		{"upload wait not a duration", env("SLUICE_BUCKET", "b", "SLUICE_TABLE", "t", "SLUICE_UPLOAD_WAIT", "none"), "SLUICE_UPLOAD_WAIT"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(tc.env)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Load = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// TestPartitioning: a Thanos bucket gets one block per group by default,
// a Cortex or Mimir bucket partitions by the limits; either is a setting.
func TestPartitioning(t *testing.T) {
	thanos := []string{"SLUICE_LAYOUT", "single-tenant", "SLUICE_TENANT", "thanos"}
	for _, tc := range []struct {
		name   string
		env    []string
		single bool
	}{
		{"multi-tenant default", nil, false},
		{"single-tenant default", thanos, true},
		{"single-tenant, limits", append(slices.Clone(thanos), EnvPartitioning, PartitioningLimits), false},
		{"multi-tenant, single", []string{EnvPartitioning, PartitioningSingle}, true},
		{"auto", []string{EnvPartitioning, PartitioningAuto}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Load(env(append([]string{"SLUICE_BUCKET", "b", "SLUICE_TABLE", "t"}, tc.env...)...))
			if err != nil {
				t.Fatal(err)
			}
			if c.Policy.SingleBlock != tc.single {
				t.Errorf("SingleBlock = %v, want %v", c.Policy.SingleBlock, tc.single)
			}
		})
	}
	if _, err := Load(env("SLUICE_BUCKET", "b", "SLUICE_TABLE", "t", EnvPartitioning, "sometimes")); err == nil || !strings.Contains(err.Error(), EnvPartitioning) {
		t.Errorf("SLUICE_PARTITIONING=sometimes: %v, want an error naming the setting", err)
	}
}

func TestLoadOverrides(t *testing.T) {
	c, err := Load(env("SLUICE_BUCKET", "b", "SLUICE_TABLE", "t", "SLUICE_RANGES", "2h,8h", "SLUICE_DELETION_DELAY", "5s",
		"SLUICE_LAYOUT", "single-tenant", "SLUICE_TENANT", "thanos", "SLUICE_PREFIX", "blocks/"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Policy.Ranges[1] != 8*time.Hour || c.DeletionDelay != 5*time.Second || c.Layout.SingleTenant != "thanos" || c.Layout.Prefix != "blocks/" {
		t.Fatalf("overrides not applied: %+v", c)
	}
}

// TestJobSizingSettings: the planner sizes a job for the time it has to
// work — its function's timeout less the deadline margin — and the other
// sizing settings pass through as given.
func TestJobSizingSettings(t *testing.T) {
	c, err := Load(env("SLUICE_BUCKET", "b", "SLUICE_TABLE", "t"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Policy.JobTimeout != 14*time.Minute || c.Policy.ScratchBytes != 8<<30 || c.Policy.SeriesChurn != 0.2 || c.Policy.SplitBytes != 256<<20 {
		t.Fatalf("defaults: job time %v, scratch %d, churn %g, split from %d; want 14m (15m less the 1m margin), 8 GiB, 0.2, 256 MiB",
			c.Policy.JobTimeout, c.Policy.ScratchBytes, c.Policy.SeriesChurn, c.Policy.SplitBytes)
	}
	if got := c.Policy.Defaults().MemoryBytes; got != 3584<<20 {
		t.Fatalf("default job memory %d, want 3.5 GiB (the compact function's 4 GiB less 512 MiB)", got)
	}
	c, err = Load(env("SLUICE_BUCKET", "b", "SLUICE_TABLE", "t", "SLUICE_JOB_TIMEOUT", "10m", "SLUICE_DEADLINE_MARGIN", "2m",
		"SLUICE_SCRATCH_BYTES", "1073741824", "SLUICE_JOB_MEMORY_BYTES", "2147483648", "SLUICE_JOB_THROUGHPUT", "1048576", "SLUICE_SERIES_CHURN", "1", "SLUICE_SPLIT_BYTES", "1024"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Policy.JobTimeout != 8*time.Minute || c.Policy.ScratchBytes != 1<<30 || c.Policy.MemoryBytes != 2<<30 || c.Policy.Throughput != 1<<20 || c.Policy.SeriesChurn != 1 || c.Policy.SplitBytes != 1024 {
		t.Fatalf("overrides: %+v", c.Policy)
	}
	c, err = Load(env("SLUICE_BUCKET", "b", "SLUICE_TABLE", "t", "SLUICE_SPLIT_BYTES", "never"))
	if err != nil || c.Policy.SplitBytes != planning.NeverSplit {
		t.Fatalf("never: %d, %v", c.Policy.SplitBytes, err)
	}
}

// TestRetentionSettings: Prometheus durations per resolution, 0 or unset
// keeps blocks for ever, and retention has its own interval.
func TestRetentionSettings(t *testing.T) {
	c, err := Load(env("SLUICE_BUCKET", "b", "SLUICE_TABLE", "t", "SLUICE_RETENTION", "90d", "SLUICE_RETENTION_5M", "1y",
		"SLUICE_RETENTION_1H", "0", "SLUICE_RETENTION_INTERVAL", "15m"))
	if err != nil {
		t.Fatal(err)
	}
	want := Retention{Raw: 90 * 24 * time.Hour, FiveMinutes: 365 * 24 * time.Hour}
	if c.Retention != want || c.RetentionInterval != 15*time.Minute || !c.Retention.Enabled() {
		t.Fatalf("retention = %+v every %v, want %+v every 15m", c.Retention, c.RetentionInterval, want)
	}
	if c.Retention.Of(0) != want.Raw || c.Retention.Of(5*60*1000) != want.FiveMinutes || c.Retention.Of(60*60*1000) != 0 || c.Retention.Of(7) != 0 {
		t.Errorf("Of does not map Thanos' resolutions: %+v", c.Retention)
	}
	d, err := Load(env("SLUICE_BUCKET", "b", "SLUICE_TABLE", "t"))
	if err != nil {
		t.Fatal(err)
	}
	if d.Retention.Enabled() || d.RetentionInterval != time.Hour {
		t.Errorf("default retention = %+v every %v; want none, every 1h", d.Retention, d.RetentionInterval)
	}
}

// TestBucketIndexSettings: the index's pass and the age an unchanged one
// may reach default to 15m and 40m (every other pass rewrites it), and
// both are settable.
func TestBucketIndexSettings(t *testing.T) {
	for _, tc := range []struct {
		env              []string
		interval, maxAge time.Duration
	}{
		{nil, 15 * time.Minute, 40 * time.Minute},
		{[]string{"SLUICE_BUCKET_INDEX_INTERVAL", "10m", "SLUICE_BUCKET_INDEX_MAX_AGE", "50m"}, 10 * time.Minute, 50 * time.Minute},
	} {
		c, err := Load(env(append([]string{"SLUICE_BUCKET", "b", "SLUICE_TABLE", "t", "SLUICE_BUCKET_INDEX", "mimir"}, tc.env...)...))
		if err != nil {
			t.Fatal(err)
		}
		if c.BucketIndexInterval != tc.interval || c.BucketIndexMaxAge != tc.maxAge {
			t.Errorf("%v: interval %v, max age %v; want %v, %v", tc.env, c.BucketIndexInterval, c.BucketIndexMaxAge, tc.interval, tc.maxAge)
		}
	}
	if _, err := Load(env("SLUICE_BUCKET", "b", "SLUICE_TABLE", "t", "SLUICE_BUCKET_INDEX_MAX_AGE", "soon")); err == nil {
		t.Error("SLUICE_BUCKET_INDEX_MAX_AGE=soon was accepted")
	}
}

// TestThanosLevelRanges: Thanos' default levels (2h uploads, then 8h, 2d
// and 14d) are Sluice ranges 8h, 48h and 336h above the 2h level-0 blocks.
func TestThanosLevelRanges(t *testing.T) {
	c, err := Load(env("SLUICE_BUCKET", "b", "SLUICE_TABLE", "t", "SLUICE_RANGES", "8h,48h,336h"))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.Policy.Ranges, []time.Duration{8 * time.Hour, 48 * time.Hour, 336 * time.Hour}) || c.Policy.TopLevel() != 3 {
		t.Fatalf("ranges = %v", c.Policy.Ranges)
	}
	if l := c.Policy.LevelOf(0, (2 * time.Hour).Milliseconds()); l != 0 {
		t.Errorf("a 2h upload is level %d, want 0", l)
	}
	if l := c.Policy.LevelOf(0, (48 * time.Hour).Milliseconds()); l != 2 {
		t.Errorf("a Thanos 2d block is level %d, want 2", l)
	}
}

// TestUploadWaitSetting: unset is the default wait; any zero duration
// turns it off, whatever its unit.
func TestUploadWaitSetting(t *testing.T) {
	for _, tc := range []struct {
		value string
		want  time.Duration // after Policy.Defaults
	}{
		{"", planning.DefaultUploadWait},
		{"0", 0},
		{"0s", 0},
		{"0m", 0},
		{"0h", 0},
		{"90s", 90 * time.Second},
		{"25m", 25 * time.Minute},
	} {
		t.Run(tc.value, func(t *testing.T) {
			c, err := Load(env("SLUICE_BUCKET", "b", "SLUICE_TABLE", "t", "SLUICE_UPLOAD_WAIT", tc.value))
			if err != nil {
				t.Fatal(err)
			}
			got := c.Policy.Defaults().UploadWait
			if got < 0 {
				got = 0
			}
			if got != tc.want {
				t.Fatalf("SLUICE_UPLOAD_WAIT=%q: the wait is %v, want %v", tc.value, got, tc.want)
			}
		})
	}
}
