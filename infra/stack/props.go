// Package stack is Sluice's CDK v2 stack: the bucket (created or imported),
// the four queues and their dead-letter queues, the table, the four
// functions with least-privilege roles, the cleaner's sweep schedule,
// alarms and outputs. Every size, name and count comes from shared/spec,
// which the local provisioner reads too.
package stack

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/jsii-runtime-go"

	"github.com/sluice-dev/sluice/shared/spec"
)

// Defaults of Props; a zero field means its default.
const (
	DefaultName                  = "sluice"
	DefaultCodeDir               = "../dist"
	DefaultNoncurrentVersionDays = 30
	DefaultAbortMultipartDays    = 7
	DefaultLogRetentionDays      = 30
	DefaultBehindAlarmAfter      = 2 * time.Hour
	DefaultChurnAlarmVersion     = 5
)

// Props configure the stack. The zero value (plus a code location) is a
// complete deployment named "sluice" with a bucket of its own.
type Props struct {
	// Resources is the resource spec. Zero means spec.Default(DefaultName).
	Resources spec.Resources
	// BucketName imports an existing bucket by name. Empty means the stack
	// creates one, named <name>-blocks-<account>-<region>. An imported
	// bucket must already have versioning on (docs/design.md §1).
	BucketName string
	// KeyPrefix is where blocks live in the bucket: "" (the root) or a
	// prefix ending in "/" (added if missing). It scopes the notification
	// and every S3 grant.
	KeyPrefix string
	// Layout is spec.LayoutMultiTenant (default) or spec.LayoutSingleTenant.
	Layout string
	// Tenant names the one tenant of a single-tenant bucket (required
	// then, and only then).
	Tenant string
	// Env adds settings to every function's environment, e.g.
	// SLUICE_DELETION_DELAY (see shared/config). Names must start with
	// SLUICE_ and must not be one the stack sets itself.
	Env map[string]string
	// NoncurrentVersionDays expires noncurrent object versions of a created
	// bucket after this many days (default 30). Sluice deletes by VersionId,
	// so noncurrent versions come only from overwrites by other writers
	// and from unversioned deletes; keep it longer than the deletion delay.
	NoncurrentVersionDays int
	// AbortMultipartDays aborts incomplete multipart uploads of a created
	// bucket after this many days (default 7).
	AbortMultipartDays int
	// SweepInterval is how often the schedule invokes the cleaner (default
	// spec.DefaultSweepInterval; whole minutes).
	SweepInterval time.Duration
	// LogRetentionDays keeps each function's logs this long (default 30;
	// one of CloudWatch Logs' allowed values).
	LogRetentionDays int
	// BehindAlarmAfter raises the falling-behind alarm when a tenant's
	// oldest level-0 block has been due for compaction this long
	// (sluice_oldest_uncompacted_block_age_seconds; default 2h, whole
	// minutes).
	BehindAlarmAfter time.Duration
	// ChurnAlarmVersion raises the churn alarm when an unfinished group
	// reaches this version: every version past the first is a re-plan
	// after a lost condition (default 5).
	ChurnAlarmVersion int
	// CodeDir holds <fn>/bootstrap for each function (default ../dist,
	// relative to infra/, where `make build` writes). Ignored if Code is set.
	CodeDir string
	// Code, when set, returns the code of a function; tests use it to point
	// at a directory with a dummy bootstrap.
	Code func(spec.FunctionID) awslambda.Code
}

// withDefaults returns p with every zero field set to its default.
func (p Props) withDefaults() Props {
	if p.Resources.Prefix == "" {
		p.Resources = spec.Default(DefaultName)
	}
	p.KeyPrefix = normalizePrefix(p.KeyPrefix)
	if p.Layout == "" {
		p.Layout = spec.LayoutMultiTenant
	}
	if p.NoncurrentVersionDays == 0 {
		p.NoncurrentVersionDays = DefaultNoncurrentVersionDays
	}
	if p.AbortMultipartDays == 0 {
		p.AbortMultipartDays = DefaultAbortMultipartDays
	}
	if p.SweepInterval == 0 {
		p.SweepInterval = spec.DefaultSweepInterval
	}
	if p.LogRetentionDays == 0 {
		p.LogRetentionDays = DefaultLogRetentionDays
	}
	if p.BehindAlarmAfter == 0 {
		p.BehindAlarmAfter = DefaultBehindAlarmAfter
	}
	if p.ChurnAlarmVersion == 0 {
		p.ChurnAlarmVersion = DefaultChurnAlarmVersion
	}
	if p.CodeDir == "" {
		p.CodeDir = DefaultCodeDir
	}
	if p.Code == nil {
		dir := p.CodeDir
		p.Code = func(fn spec.FunctionID) awslambda.Code {
			return awslambda.Code_FromAsset(jsii.String(filepath.Join(dir, string(fn))), nil)
		}
	}
	return p
}

func normalizePrefix(p string) string {
	if p != "" && !strings.HasSuffix(p, "/") {
		p += "/"
	}
	return p
}

// validate reports the first setting that cannot be deployed.
func (p Props) validate() error {
	if p.Layout != spec.LayoutMultiTenant && p.Layout != spec.LayoutSingleTenant {
		return fmt.Errorf("layout %q: want %q or %q", p.Layout, spec.LayoutMultiTenant, spec.LayoutSingleTenant)
	}
	if (p.Layout == spec.LayoutSingleTenant) != (p.Tenant != "") {
		return fmt.Errorf("layout %q, tenant %q: a single-tenant bucket needs a tenant, a multi-tenant one none", p.Layout, p.Tenant)
	}
	for k := range p.Env {
		if !strings.HasPrefix(k, "SLUICE_") || reservedEnv[k] {
			return fmt.Errorf("env %s: must start with SLUICE_ and not be one of the stack's own settings", k)
		}
	}
	if strings.HasPrefix(p.KeyPrefix, "/") || strings.ContainsAny(p.KeyPrefix, "*?") {
		return fmt.Errorf("prefix %q: must not start with / or contain * or ?", p.KeyPrefix)
	}
	if p.NoncurrentVersionDays < 1 || p.AbortMultipartDays < 1 {
		return fmt.Errorf("noncurrentDays %d, abortMultipartDays %d: must be ≥ 1", p.NoncurrentVersionDays, p.AbortMultipartDays)
	}
	if p.SweepInterval < time.Minute || p.SweepInterval%time.Minute != 0 {
		return fmt.Errorf("sweep interval %v: must be whole minutes, ≥ 1m", p.SweepInterval)
	}
	if p.BehindAlarmAfter < time.Minute || p.BehindAlarmAfter%time.Minute != 0 || p.ChurnAlarmVersion < 2 {
		return fmt.Errorf("behind alarm %v, churn alarm version %d: want whole minutes ≥ 1m and a version ≥ 2", p.BehindAlarmAfter, p.ChurnAlarmVersion)
	}
	if _, ok := retentions[p.LogRetentionDays]; !ok {
		return fmt.Errorf("logRetentionDays %d: not a CloudWatch Logs retention", p.LogRetentionDays)
	}
	return nil
}

// reservedEnv are the variables the stack sets from its own resources.
var reservedEnv = map[string]bool{
	spec.EnvBucket: true, spec.EnvTable: true, spec.EnvKeyPrefix: true, spec.EnvLayout: true, spec.EnvTenant: true,
	spec.EnvBlockEvents: true, spec.EnvJobsQueue: true, spec.EnvCleanerQueue: true, spec.EnvBlockOps: true,
}

// retentions maps CloudWatch Logs' allowed retentions, in days, to CDK's names.
var retentions = map[int]awslogs.RetentionDays{
	1: awslogs.RetentionDays_ONE_DAY, 3: awslogs.RetentionDays_THREE_DAYS, 5: awslogs.RetentionDays_FIVE_DAYS,
	7: awslogs.RetentionDays_ONE_WEEK, 14: awslogs.RetentionDays_TWO_WEEKS, 30: awslogs.RetentionDays_ONE_MONTH,
	60: awslogs.RetentionDays_TWO_MONTHS, 90: awslogs.RetentionDays_THREE_MONTHS, 120: awslogs.RetentionDays_FOUR_MONTHS,
	150: awslogs.RetentionDays_FIVE_MONTHS, 180: awslogs.RetentionDays_SIX_MONTHS, 365: awslogs.RetentionDays_ONE_YEAR,
	400: awslogs.RetentionDays_THIRTEEN_MONTHS, 545: awslogs.RetentionDays_EIGHTEEN_MONTHS, 731: awslogs.RetentionDays_TWO_YEARS,
	1096: awslogs.RetentionDays_THREE_YEARS, 1827: awslogs.RetentionDays_FIVE_YEARS, 2192: awslogs.RetentionDays_SIX_YEARS,
	2557: awslogs.RetentionDays_SEVEN_YEARS, 2922: awslogs.RetentionDays_EIGHT_YEARS, 3288: awslogs.RetentionDays_NINE_YEARS,
	3653: awslogs.RetentionDays_TEN_YEARS,
}

// Context keys read by PropsFromContext (`cdk deploy -c key=value`).
const (
	CtxName           = "name"           // resource name prefix, default "sluice"
	CtxBucket         = "bucket"         // import this bucket instead of creating one
	CtxPrefix         = "prefix"         // key prefix of the blocks in the bucket
	CtxLayout         = "layout"         // multi-tenant | single-tenant
	CtxTenant         = "tenant"         // the tenant of a single-tenant bucket
	CtxEnv            = "env"            // extra settings: NAME=value,NAME=value
	CtxNoncurrentDays = "noncurrentDays" // created bucket: expire noncurrent versions
	CtxAbortDays      = "abortMultipartDays"
	CtxSweepMinutes   = "sweepMinutes"
	CtxLogDays        = "logRetentionDays"
	CtxBehindMinutes  = "behindAlarmMinutes"
	CtxChurnVersion   = "churnAlarmVersion"
	CtxCodeDir        = "codeDir"
)

// PropsFromContext reads Props from CDK context values; get returns "" for
// an unset key.
func PropsFromContext(get func(key string) string) (Props, error) {
	p := Props{
		BucketName: get(CtxBucket),
		KeyPrefix:  get(CtxPrefix),
		Layout:     get(CtxLayout),
		Tenant:     get(CtxTenant),
		CodeDir:    get(CtxCodeDir),
	}
	if n := get(CtxName); n != "" {
		p.Resources = spec.Default(n)
	}
	ints := []struct {
		key string
		dst *int
	}{
		{CtxNoncurrentDays, &p.NoncurrentVersionDays},
		{CtxAbortDays, &p.AbortMultipartDays},
		{CtxLogDays, &p.LogRetentionDays},
		{CtxChurnVersion, &p.ChurnAlarmVersion},
	}
	for _, i := range ints {
		if v := get(i.key); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return Props{}, fmt.Errorf("context %s=%q: want a positive whole number", i.key, v)
			}
			*i.dst = n
		}
	}
	if v := get(CtxEnv); v != "" {
		// NAME=value pairs separated by commas; a part without "=" continues
		// the previous value ("SLUICE_RANGES=12h,24h").
		p.Env = map[string]string{}
		last := ""
		for _, kv := range strings.Split(v, ",") {
			k, val, ok := strings.Cut(strings.TrimSpace(kv), "=")
			switch {
			case ok && k != "":
				p.Env[k], last = val, k
			case !ok && last != "":
				p.Env[last] += "," + k
			default:
				return Props{}, fmt.Errorf("context %s=%q: want NAME=value,NAME=value", CtxEnv, v)
			}
		}
	}
	minutes := []struct {
		key string
		dst *time.Duration
	}{
		{CtxSweepMinutes, &p.SweepInterval},
		{CtxBehindMinutes, &p.BehindAlarmAfter},
	}
	for _, m := range minutes {
		if v := get(m.key); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return Props{}, fmt.Errorf("context %s=%q: want a positive whole number", m.key, v)
			}
			*m.dst = time.Duration(n) * time.Minute
		}
	}
	if err := p.withDefaults().validate(); err != nil {
		return Props{}, err
	}
	return p, nil
}
