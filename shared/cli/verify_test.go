package cli

import (
	"context"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/sluice-dev/sluice/shared/blockgen"
	"github.com/sluice-dev/sluice/shared/blockmeta"
	"github.com/sluice-dev/sluice/shared/planning"
	"github.com/sluice-dev/sluice/shared/protocol"
	"github.com/sluice-dev/sluice/shared/records"
	"github.com/sluice-dev/sluice/shared/stream"
)

// uploadAndRegister uploads block directories for tenant with `sluice
// upload` and registers them LIVE with the versions they got, as the
// planner would; edit, when set, changes each record before it is put.
func (w *world) uploadAndRegister(tenant string, dirs []string, edit func(i int, b *records.Block)) []records.Block {
	w.t.Helper()
	w.run(append([]string{"upload", "--quiet", "--tenant", tenant}, dirs...)...).wantCode(w.t, 0)
	ctx := context.Background()
	var out []records.Block
	for i, d := range dirs {
		lb, err := CheckBlockDir(d)
		if err != nil {
			w.t.Fatal(err)
		}
		id := lb.Meta.ULID.String()
		vs, err := ListVersions(ctx, w.env.Clients.S3, w.env.Deployment.Bucket, tenant+"/"+id+"/")
		if err != nil {
			w.t.Fatal(err)
		}
		b := records.Block{Tenant: tenant, ID: id, MinT: lb.Meta.MinTime, MaxT: lb.Meta.MaxTime, State: protocol.BlockLive,
			Gen: 1, Published: true, Series: lb.Meta.Stats.NumSeries, Samples: lb.Meta.Stats.NumSamples}
		for _, v := range vs {
			rel := strings.TrimPrefix(v.Key, tenant+"/"+id+"/")
			if rel == blockmeta.MetaFilename {
				b.MetaVersionID = v.VersionID
				continue
			}
			b.Files = append(b.Files, records.ObjectVersion{RelPath: rel, VersionID: v.VersionID, Size: v.Size})
		}
		if edit != nil {
			edit(i, &b)
		}
		if err := w.store.RegisterBlock(ctx, b, nil, nil); err != nil {
			w.t.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

func TestVerifyCommand(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	bucket := w.env.Deployment.Bucket

	t.Run("holds for live blocks side by side", func(t *testing.T) {
		w.uploadAndRegister("fine", gen(t, blockgen.Options{Tenant: "fine", Blocks: 3}), nil)
		r := w.run("verify", "--tenant", "fine")
		r.wantCode(t, 0)
		for _, want := range []string{"3 visible block(s)", "I2 no double coverage", "I3 no dangling files", "I4 no orphans"} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("output lacks %q", want)
			}
		}
		if strings.Contains(r.stdout, "FAILED") {
			t.Errorf("a check failed:\n%s", r.stdout)
		}
	})

	t.Run("I2: two live replicas of one range", func(t *testing.T) {
		bs := w.uploadAndRegister("replicas", gen(t, blockgen.Options{Tenant: "replicas", Blocks: 1, ReplicationFactor: 2}), nil)
		r := w.run("verify", "--tenant", "replicas")
		r.wantCode(t, 1)
		r.wantOneLineError(t, "1 violation(s)")
		if !strings.Contains(checkLine(r.stdout, "I2"), "FAILED (1)") ||
			!strings.Contains(r.stdout, "replicas/"+bs[0].ID) || !strings.Contains(r.stdout, "replicas/"+bs[1].ID) {
			t.Errorf("I2 violation not reported with both blocks:\n%s", r.stdout)
		}
	})

	t.Run("I2: partitions of one group version may overlap", func(t *testing.T) {
		w.uploadAndRegister("parts", gen(t, blockgen.Options{Tenant: "parts", Blocks: 1, ReplicationFactor: 2}), func(i int, b *records.Block) {
			b.Level = 1
			g := planning.GroupKey{Stream: stream.Stream{Labels: map[string]string{"job": "parts"}}.ID(), Level: 1, RangeStart: 1704067200000}
			b.ProducedBy = protocol.PartitionRef{VersionRef: protocol.VersionRef{Tenant: "parts", Group: g, Version: 3}, Partition: i}.String()
		})
		w.run("verify", "--tenant", "parts").wantCode(t, 0)
	})

	t.Run("I2: no-compact blocks are exempt", func(t *testing.T) {
		w.uploadAndRegister("nocompact", gen(t, blockgen.Options{Tenant: "nocompact", Blocks: 1, ReplicationFactor: 2}), func(i int, b *records.Block) {
			b.NoCompact = i == 1
		})
		w.run("verify", "--tenant", "nocompact").wantCode(t, 0)
	})

	t.Run("I3: a file meta.json lists is gone", func(t *testing.T) {
		bs := w.uploadAndRegister("dangling", gen(t, blockgen.Options{Tenant: "dangling", Blocks: 1}), nil)
		var chunk records.ObjectVersion
		for _, f := range bs[0].Files {
			if strings.HasPrefix(f.RelPath, "chunks/") {
				chunk = f
			}
		}
		key := "dangling/" + bs[0].ID + "/" + chunk.RelPath
		if _, err := w.env.Clients.S3.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), VersionId: aws.String(chunk.VersionID)}); err != nil {
			t.Fatal(err)
		}
		r := w.run("verify", "--tenant", "dangling")
		r.wantCode(t, 1)
		if !strings.Contains(checkLine(r.stdout, "I3"), "FAILED") || !strings.Contains(r.stdout, key+": listed in meta.json but missing") {
			t.Errorf("I3 violation not reported at %s:\n%s", key, r.stdout)
		}
	})

	t.Run("I4: objects no record names", func(t *testing.T) {
		bs := w.uploadAndRegister("orphans", gen(t, blockgen.Options{Tenant: "orphans", Blocks: 1}), nil)
		stray := "orphans/" + bs[0].ID + "/chunks/000099"
		if _, err := w.env.Clients.S3.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(stray), Body: strings.NewReader("x")}); err != nil {
			t.Fatal(err)
		}
		unregistered := gen(t, blockgen.Options{Tenant: "orphans-2", Blocks: 1})
		w.run("upload", "--quiet", "--tenant", "orphans", unregistered[0]).wantCode(t, 0)
		r := w.run("verify", "--tenant", "orphans")
		r.wantCode(t, 1)
		if !strings.Contains(r.stdout, stray+": version") || !strings.Contains(r.stdout, "not one the LIVE block's record names") {
			t.Errorf("stray version not reported:\n%s", r.stdout)
		}
		if !strings.Contains(r.stdout, "no block record") {
			t.Errorf("unregistered block not reported:\n%s", r.stdout)
		}
	})

	t.Run("without --tenant it checks every tenant", func(t *testing.T) {
		r := w.run("verify", "--json")
		r.wantCode(t, 1)
		for _, tenant := range []string{"fine", "replicas", "parts", "nocompact", "dangling", "orphans"} {
			if !strings.Contains(r.stdout, `"`+tenant+`"`) {
				t.Errorf("tenant %s not checked", tenant)
			}
		}
	})

	t.Run("refusals", func(t *testing.T) {
		w.run("verify", "--tenant", "..").wantCode(t, 2)
		r := runWith(t, map[string]string{"AWS_ENDPOINT_URL": w.vars["AWS_ENDPOINT_URL"]}, "verify")
		r.wantCode(t, 2)
		r.wantOneLineError(t, "no bucket", "no table")
	})
}

// checkLine returns verify's result line of one invariant.
func checkLine(out, inv string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), inv+" ") {
			return l
		}
	}
	return ""
}
