// Package overrides is Sluice's runtime configuration: per-tenant limits
// read from one YAML object in the bucket (sluice-overrides.yaml at the
// layout's root), as Cortex and Mimir read their runtime config, effective
// without a redeploy and validated on load with an error naming the line.
//
//	overrides:
//	  acme:
//	    retention: 90d           # raw blocks (SLUICE_RETENTION for the rest)
//	    retention_5m: 1y
//	    retention_1h: 2y
//	    max_series_per_partition: 500000
//	    downsample: true          # SLUICE_DOWNSAMPLE for the rest
//	    downsample_raw_span: 40h  # SLUICE_DOWNSAMPLE_RAW_SPAN
//	    downsample_5m_span: 10d   # SLUICE_DOWNSAMPLE_5M_SPAN
//	  legacy:
//	    compaction_disabled: true   # registered, never compacted
//
// Replica labels and level ranges stay deployment-wide: a stream's id and
// a group's key are derived from them when a block is registered, so
// changing them for a tenant in flight would put its blocks under new
// streams and groups beside the old ones.
package overrides

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v3"

	"github.com/sluice-dev/sluice/shared/blockkey"
	"github.com/sluice-dev/sluice/shared/config"
	"github.com/sluice-dev/sluice/shared/planning"
)

// File is the object's key under the layout's root.
const File = "sluice-overrides.yaml"

// MaxBytes bounds the object Sluice reads.
const MaxBytes = 1 << 20

// Limits are one tenant's overrides; a zero field keeps the deployment's
// setting.
type Limits struct {
	Retention             Duration `yaml:"retention"`
	Retention5m           Duration `yaml:"retention_5m"`
	Retention1h           Duration `yaml:"retention_1h"`
	CompactionDisabled    bool     `yaml:"compaction_disabled"`
	MaxSeriesPerPartition uint64   `yaml:"max_series_per_partition"`
	// Downsample turns downsampling on or off for the tenant (unset: the
	// deployment's); the spans are the shortest raw and 5m blocks it
	// downsamples. A raw span longer than the top level's range means
	// none of its raw blocks ever is.
	Downsample         *bool    `yaml:"downsample"`
	DownsampleRawSpan  Duration `yaml:"downsample_raw_span"`
	DownsampleFiveSpan Duration `yaml:"downsample_5m_span"`
}

// Duration is a Prometheus duration in YAML ("90d", "2w", "1y").
type Duration time.Duration

// UnmarshalYAML reads a Prometheus duration, naming the line of a bad one.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := model.ParseDuration(n.Value)
	if err != nil || v <= 0 {
		return fmt.Errorf("line %d: %q is not a duration such as 90d, 2w or 1y", n.Line, n.Value)
	}
	*d = Duration(v)
	return nil
}

// Overrides are every tenant's limits.
type Overrides struct {
	Tenants map[string]Limits `yaml:"overrides"`
}

// Parse reads and validates an overrides object. Unknown fields, bad
// durations and bad tenant ids are errors that name their line.
func Parse(data []byte) (Overrides, error) {
	var o Overrides
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&o); err != nil && !errors.Is(err, io.EOF) {
		return Overrides{}, fmt.Errorf("%s: %w", File, err)
	}
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err == nil {
		if err := checkTenants(&root); err != nil {
			return Overrides{}, fmt.Errorf("%s: %w", File, err)
		}
	}
	return o, nil
}

// checkTenants validates every tenant id under overrides:, by line.
func checkTenants(root *yaml.Node) error {
	if len(root.Content) == 0 || root.Content[0].Kind != yaml.MappingNode {
		return nil
	}
	top := root.Content[0]
	for i := 0; i+1 < len(top.Content); i += 2 {
		if top.Content[i].Value != "overrides" || top.Content[i+1].Kind != yaml.MappingNode {
			continue
		}
		tenants := top.Content[i+1]
		for j := 0; j+1 < len(tenants.Content); j += 2 {
			k := tenants.Content[j]
			if err := blockkey.ValidateTenant(k.Value); err != nil {
				return fmt.Errorf("line %d: tenant %q: %v", k.Line, k.Value, err)
			}
		}
	}
	return nil
}

// Retention is tenant's retention: its overrides over the deployment's.
func (o Overrides) Retention(tenant string, base config.Retention) config.Retention {
	l := o.Tenants[tenant]
	if l.Retention > 0 {
		base.Raw = time.Duration(l.Retention)
	}
	if l.Retention5m > 0 {
		base.FiveMinutes = time.Duration(l.Retention5m)
	}
	if l.Retention1h > 0 {
		base.OneHour = time.Duration(l.Retention1h)
	}
	return base
}

// AnyRetention reports whether any tenant overrides a retention.
func (o Overrides) AnyRetention() bool {
	for _, l := range o.Tenants {
		if l.Retention > 0 || l.Retention5m > 0 || l.Retention1h > 0 {
			return true
		}
	}
	return false
}

// CompactionDisabled reports whether tenant's blocks are never compacted.
func (o Overrides) CompactionDisabled(tenant string) bool {
	return o.Tenants[tenant].CompactionDisabled
}

// Policy is the planning policy for tenant's groups.
func (o Overrides) Policy(tenant string, base planning.Policy) planning.Policy {
	l := o.Tenants[tenant]
	if l.MaxSeriesPerPartition > 0 {
		base.MaxSeriesPerPartition = l.MaxSeriesPerPartition
	}
	if l.Downsample != nil {
		base.Downsample = *l.Downsample
	}
	if l.DownsampleRawSpan > 0 {
		base.DownsampleRawSpan = time.Duration(l.DownsampleRawSpan)
	}
	if l.DownsampleFiveSpan > 0 {
		base.DownsampleFiveMinuteSpan = time.Duration(l.DownsampleFiveSpan)
	}
	return base
}

// Describe lists tenant's overrides as "key value" pairs, for status.
func (o Overrides) Describe(tenant string) []string {
	l, ok := o.Tenants[tenant]
	if !ok {
		return nil
	}
	var out []string
	add := func(k string, d Duration) {
		if d > 0 {
			out = append(out, k+" "+model.Duration(d).String())
		}
	}
	add("retention", l.Retention)
	add("retention_5m", l.Retention5m)
	add("retention_1h", l.Retention1h)
	if l.CompactionDisabled {
		out = append(out, "compaction_disabled")
	}
	if l.MaxSeriesPerPartition > 0 {
		out = append(out, fmt.Sprintf("max_series_per_partition %d", l.MaxSeriesPerPartition))
	}
	if l.Downsample != nil {
		out = append(out, fmt.Sprintf("downsample %v", *l.Downsample))
	}
	add("downsample_raw_span", l.DownsampleRawSpan)
	add("downsample_5m_span", l.DownsampleFiveSpan)
	sort.Strings(out)
	return out
}

// Loader reads the overrides object's bytes; ok is false when there is
// none.
type Loader func(ctx context.Context) (data []byte, ok bool, err error)

// Cache holds the overrides a process last read, and reads them again
// once TTL has passed. An object that fails validation is logged by the
// caller with its error and the last good overrides stay in force (none,
// before any), so a typo never changes what Sluice does.
type Cache struct {
	TTL time.Duration

	mu      sync.Mutex
	current Overrides
	loaded  time.Time
}

// Get returns the overrides, reading them with load when they are older
// than TTL. err is the failure of the read this call made (the overrides
// returned are then the last good ones); a call served from the cache
// reports none, so a bad object is logged once per TTL, not per call.
func (c *Cache) Get(ctx context.Context, now time.Time, load Loader) (Overrides, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.loaded.IsZero() && now.Sub(c.loaded) < c.TTL {
		return c.current, nil
	}
	c.loaded = now
	data, ok, err := load(ctx)
	switch {
	case err != nil:
		return c.current, fmt.Errorf("read %s: %w", File, err)
	case !ok:
		c.current = Overrides{}
	default:
		o, err := Parse(data)
		if err != nil {
			return c.current, err
		}
		c.current = o
	}
	return c.current, nil
}

// Key is the overrides object's key in a bucket of layout l.
func Key(l blockkey.Layout) string { return l.TenantPrefix("") + File }
