package stack

import (
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/shared/spec"
)

func TestPropsFromContext(t *testing.T) {
	cases := []struct {
		name    string
		ctx     map[string]string
		want    func(p Props) bool
		wantErr string
	}{
		{name: "defaults: own bucket, multi-tenant at the root", ctx: nil, want: func(p Props) bool {
			p = p.withDefaults()
			return p.BucketName == "" && p.KeyPrefix == "" && p.Layout == spec.LayoutMultiTenant &&
				p.Resources.Prefix == DefaultName && p.SweepInterval == 5*time.Minute &&
				p.NoncurrentVersionDays == DefaultNoncurrentVersionDays && p.CodeDir == DefaultCodeDir
		}},
		{name: "imported bucket under a prefix", ctx: map[string]string{"bucket": "b", "prefix": "metrics"}, want: func(p Props) bool {
			return p.BucketName == "b" && p.withDefaults().KeyPrefix == "metrics/"
		}},
		{name: "single tenant", ctx: map[string]string{"layout": "single-tenant", "tenant": "prod"}, want: func(p Props) bool {
			return p.Layout == spec.LayoutSingleTenant && p.Tenant == "prod"
		}},
		{name: "numbers and name", ctx: map[string]string{"name": "s2", "noncurrentDays": "90", "abortMultipartDays": "2", "sweepMinutes": "10", "logRetentionDays": "14"}, want: func(p Props) bool {
			return p.Resources.Prefix == "s2" && p.NoncurrentVersionDays == 90 && p.AbortMultipartDays == 2 &&
				p.SweepInterval == 10*time.Minute && p.LogRetentionDays == 14
		}},
		{name: "extra settings", ctx: map[string]string{"env": "SLUICE_DELETION_DELAY=24h, SLUICE_RANGES=12h,24h,SLUICE_CLOSE_DELAY=2h"}, want: func(p Props) bool {
			return p.Env["SLUICE_DELETION_DELAY"] == "24h" && p.Env["SLUICE_RANGES"] == "12h,24h" &&
				p.Env["SLUICE_CLOSE_DELAY"] == "2h" && len(p.Env) == 3
		}},
		{name: "alarm thresholds", ctx: map[string]string{"behindAlarmMinutes": "240", "churnAlarmVersion": "8"}, want: func(p Props) bool {
			return p.BehindAlarmAfter == 4*time.Hour && p.ChurnAlarmVersion == 8
		}},
		{name: "alarm thresholds default", ctx: nil, want: func(p Props) bool {
			p = p.withDefaults()
			return p.BehindAlarmAfter == 2*time.Hour && p.ChurnAlarmVersion == 5
		}},
		{name: "a churn alarm at version 1 would always fire", ctx: map[string]string{"churnAlarmVersion": "1"}, wantErr: "churn alarm version 1"},
		{name: "single tenant needs a tenant", ctx: map[string]string{"layout": "single-tenant"}, wantErr: "needs a tenant"},
		{name: "unknown layout", ctx: map[string]string{"layout": "flat"}, wantErr: "layout"},
		{name: "wildcard prefix", ctx: map[string]string{"prefix": "a*"}, wantErr: "prefix"},
		{name: "absolute prefix", ctx: map[string]string{"prefix": "/a"}, wantErr: "prefix"},
		{name: "bad number", ctx: map[string]string{"noncurrentDays": "soon"}, wantErr: "noncurrentDays"},
		{name: "bad retention", ctx: map[string]string{"logRetentionDays": "31"}, wantErr: "logRetentionDays"},
		{name: "env may not override a resource", ctx: map[string]string{"env": "SLUICE_BUCKET=other"}, wantErr: "SLUICE_BUCKET"},
		{name: "env names are Sluice's", ctx: map[string]string{"env": "AWS_REGION=x"}, wantErr: "AWS_REGION"},
		{name: "env needs NAME=value", ctx: map[string]string{"env": "SLUICE_X"}, wantErr: "NAME=value"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := PropsFromContext(func(k string) string { return c.ctx[k] })
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("err %v, want one mentioning %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !c.want(p) {
				t.Errorf("props %+v", p)
			}
		})
	}
}

func TestCamel(t *testing.T) {
	for in, want := range map[string]string{"compaction-jobs": "CompactionJobs", "block-ops": "BlockOps", "planner": "Planner"} {
		if got := camel(in); got != want {
			t.Errorf("camel(%q) = %q, want %q", in, got, want)
		}
	}
}
