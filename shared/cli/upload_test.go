package cli

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sluice-dev/sluice/shared/blockgen"
	"github.com/sluice-dev/sluice/shared/blockkey"
	"github.com/sluice-dev/sluice/shared/spec"
)

// recordingS3 records the order of PUTs; nothing exists before.
type recordingS3 struct {
	mu   sync.Mutex
	puts []string
}

func (r *recordingS3) PutObject(_ context.Context, in *s3.PutObjectInput, _ ...func(*s3.Options)) (*s3.PutObjectOutput, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.puts = append(r.puts, aws.ToString(in.Key))
	return &s3.PutObjectOutput{VersionId: aws.String("v1")}, nil
}

func (r *recordingS3) HeadObject(context.Context, *s3.HeadObjectInput, ...func(*s3.Options)) (*s3.HeadObjectOutput, error) {
	return nil, &s3types.NotFound{}
}

func TestUploadPutsMetaJSONLastOfEachBlock(t *testing.T) {
	dirs := gen(t, blockgen.Options{Tenant: "order", Blocks: 3})
	blocks, err := CheckBlockDirs(dirs)
	if err != nil {
		t.Fatal(err)
	}
	fake := &recordingS3{}
	sum, err := UploadBlocks(context.Background(), fake, blocks, UploadOptions{Bucket: "b", Tenant: "team-a"})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Uploaded != 3 {
		t.Fatalf("uploaded %d blocks, want 3", sum.Uploaded)
	}
	// Each block's keys are contiguous and end with its meta.json; its
	// index comes before its chunks' meta.json.
	seenMeta := map[string]bool{}
	for i, key := range fake.puts {
		k, err := blockkey.Parse(key, blockkey.Layout{})
		if err != nil {
			t.Fatalf("put %q: %v", key, err)
		}
		if k.Tenant != "team-a" {
			t.Errorf("put %q: tenant %q", key, k.Tenant)
		}
		if seenMeta[k.Block.String()] {
			t.Errorf("put %d %q after the block's meta.json", i, key)
		}
		if k.File == "meta.json" {
			seenMeta[k.Block.String()] = true
		}
	}
	if len(seenMeta) != 3 {
		t.Errorf("meta.json of %d blocks uploaded, want 3: %v", len(seenMeta), fake.puts)
	}
	if !strings.HasSuffix(fake.puts[len(fake.puts)-1], "/meta.json") {
		t.Errorf("last put %q is not a meta.json", fake.puts[len(fake.puts)-1])
	}
}

func TestCheckBlockDirRefusesWhatIsNotABlock(t *testing.T) {
	good := gen(t, blockgen.Options{Tenant: "refuse", Blocks: 1})[0]
	cases := []struct {
		name   string
		break_ func(t *testing.T, dir string)
		want   string
	}{
		{"no meta.json", func(t *testing.T, dir string) { rm(t, dir, "meta.json") }, "no meta.json"},
		{"meta.json is not JSON", func(t *testing.T, dir string) { write(t, dir, "meta.json", "{not json") }, "meta.json"},
		{"no index", func(t *testing.T, dir string) { rm(t, dir, "index") }, "index"},
		{"chunk missing", func(t *testing.T, dir string) { rm(t, dir, "chunks/000001") }, "chunks"},
		{"chunk truncated", func(t *testing.T, dir string) { write(t, dir, "chunks/000001", "short") }, "bytes"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), filepath.Base(good))
			copyDir(t, good, dir)
			c.break_(t, dir)
			_, err := CheckBlockDir(dir)
			if err == nil {
				t.Fatal("accepted")
			}
			if _, ok := err.(*RefusedError); !ok {
				t.Errorf("error %T, want *RefusedError", err)
			}
			if !strings.Contains(err.Error(), "is not a block") || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q does not say it is not a block because of %q", err, c.want)
			}
		})
	}
	if _, err := CheckBlockDir(t.TempDir()); err == nil || !strings.Contains(err.Error(), "no meta.json") {
		t.Errorf("empty directory: %v", err)
	}
	if _, err := CheckBlockDir(filepath.Join(good, "index")); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("a file: %v", err)
	}
}

func TestUploadCommand(t *testing.T) {
	w := newWorld(t)
	dirs := gen(t, blockgen.Options{Tenant: "up", Blocks: 2, ReplicationFactor: 2})

	t.Run("uploads every file, meta.json last, and notifies once per block", func(t *testing.T) {
		r := w.run(append([]string{"upload", "--tenant", "team-a"}, dirs...)...)
		r.wantCode(t, 0)
		if !strings.Contains(r.stdout, "uploaded 4 block(s) of tenant team-a") {
			t.Errorf("summary: %q", r.stdout)
		}
		vs, err := ListVersions(context.Background(), w.env.Clients.S3, w.env.Deployment.Bucket, "team-a/")
		if err != nil {
			t.Fatal(err)
		}
		metas := 0
		for _, v := range vs {
			if strings.HasSuffix(v.Key, "/meta.json") {
				metas++
			}
		}
		if metas != 4 {
			t.Errorf("%d meta.json in the bucket, want 4", metas)
		}
		// One S3 notification per meta.json reaches block-events. Counted
		// by message id, received with a short visibility and a long bound:
		// on make test's shared emulator a receive can wait its turn for
		// seconds, and one whose answer is lost hides what it received
		// for its visibility timeout (TestReplayDLQCommand).
		deadline := time.Now().Add(60 * time.Second)
		got := map[string]bool{}
		for time.Now().Before(deadline) && len(got) < 4 {
			out, err := w.env.Clients.SQS.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{
				QueueUrl: aws.String(w.env.Deployment.QueueURLs[spec.BlockEvents]), MaxNumberOfMessages: 10, WaitTimeSeconds: 1, VisibilityTimeout: 5,
			})
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range out.Messages {
				if strings.Contains(aws.ToString(m.Body), "meta.json") {
					got[aws.ToString(m.MessageId)] = true
				}
			}
		}
		if len(got) != 4 {
			t.Errorf("%d notifications for meta.json, want 4", len(got))
		}
	})

	t.Run("skips blocks already in the bucket", func(t *testing.T) {
		r := w.run(append([]string{"upload", "--tenant", "team-a"}, dirs[:1]...)...)
		r.wantCode(t, 0)
		if !strings.Contains(r.stdout, "nothing uploaded") || !strings.Contains(r.stdout, "skipped team-a/") {
			t.Errorf("second upload: %q", r.stdout)
		}
	})

	t.Run("--force uploads again, as a new version", func(t *testing.T) {
		r := w.run("upload", "--quiet", "--force", "--tenant", "team-a", dirs[0])
		r.wantCode(t, 0)
		if !strings.Contains(r.stdout, "uploaded 1 block(s)") {
			t.Errorf("forced upload: %q", r.stdout)
		}
		lb, _ := CheckBlockDir(dirs[0])
		vs, err := ListVersions(context.Background(), w.env.Clients.S3, w.env.Deployment.Bucket, "team-a/"+lb.Meta.ULID.String()+"/meta.json")
		if err != nil || len(vs) != 2 {
			t.Errorf("%d versions of meta.json, want 2 (%v)", len(vs), err)
		}
	})

	t.Run("refuses a directory that is not a block and uploads nothing", func(t *testing.T) {
		notBlock := t.TempDir()
		r := w.run("upload", "--tenant", "team-b", dirs[0], notBlock)
		r.wantCode(t, 1)
		r.wantOneLineError(t, notBlock, "is not a block", "no meta.json")
		vs, err := ListVersions(context.Background(), w.env.Clients.S3, w.env.Deployment.Bucket, "team-b/")
		if err != nil {
			t.Fatal(err)
		}
		if len(vs) != 0 {
			t.Errorf("%d objects of team-b uploaded, want none", len(vs))
		}
	})

	t.Run("a Prometheus data directory: its complete blocks, the rest skipped", func(t *testing.T) {
		data := promDataDir(t, dirs[:2])
		r := w.run("upload", "--quiet", "--tenant", "team-c", data)
		r.wantCode(t, 0)
		for _, want := range []string{"uploaded 2 block(s) of tenant team-c",
			"skipping " + filepath.Join(data, "wal") + ": the head's wal/",
			"skipping " + filepath.Join(data, "chunks_head") + ": the head's chunks_head/",
			"skipping " + filepath.Join(data, "lock") + ": Prometheus' lock file",
			"skipping " + filepath.Join(data, "01HK1BZM80NYSP3QAS7RW35VJW.tmp-for-creation") + ": a temporary directory",
			"skipping " + filepath.Join(data, "01HK1BZM80NYSP3QAS7RW35VJX") + ": no meta.json: an incomplete block",
		} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("upload output lacks %q:\n%s", want, r.stdout)
			}
		}
		vs, err := ListVersions(context.Background(), w.env.Clients.S3, w.env.Deployment.Bucket, "team-c/")
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range vs {
			if strings.Contains(v.Key, "wal") || strings.Contains(v.Key, "tmp") || strings.Contains(v.Key, "VJX") || strings.Contains(v.Key, "lock") {
				t.Errorf("uploaded %s, which is no complete block's", v.Key)
			}
		}
	})

	t.Run("refuses a bad tenant name", func(t *testing.T) {
		r := w.run("upload", "--tenant", "team/a", dirs[0])
		r.wantCode(t, 2)
		r.wantOneLineError(t, `tenant "team/a"`, "invalid tenant id")
	})

	t.Run("asks for a tenant", func(t *testing.T) {
		r := w.run("upload", dirs[0])
		r.wantCode(t, 2)
		r.wantOneLineError(t, "--tenant is required")
	})

	t.Run("says which endpoint it cannot reach", func(t *testing.T) {
		vars := map[string]string{}
		for k, v := range w.vars {
			vars[k] = v
		}
		vars["AWS_ENDPOINT_URL"] = "http://127.0.0.1:" + closedPort(t)
		start := time.Now()
		r := runWith(t, vars, "upload", "--tenant", "team-a", dirs[0])
		r.wantCode(t, 1)
		r.wantOneLineError(t, "cannot reach the AWS endpoint "+vars["AWS_ENDPOINT_URL"])
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("took %v to give up", d)
		}
	})
}

func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(l.Addr().String())
	l.Close()
	return port
}

func rm(t *testing.T, dir, rel string) {
	t.Helper()
	if err := os.Remove(filepath.Join(dir, rel)); err != nil {
		t.Fatal(err)
	}
}

func write(t *testing.T, dir, rel, body string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, rel), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

func copyDir(t *testing.T, from, to string) {
	t.Helper()
	err := filepath.Walk(from, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		dst := filepath.Join(to, rel)
		if info.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(dst, b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// promDataDir lays blocks out as a Prometheus server's data directory:
// the blocks, and beside them the head (wal/, chunks_head/), the lock
// file, a compaction's temporary directory and a block still being
// written (no meta.json yet).
func promDataDir(t *testing.T, blocks []string) string {
	t.Helper()
	data := t.TempDir()
	for _, b := range blocks {
		copyTree(t, b, filepath.Join(data, filepath.Base(b)))
	}
	for _, d := range []string{"wal", "chunks_head", "01HK1BZM80NYSP3QAS7RW35VJW.tmp-for-creation", "01HK1BZM80NYSP3QAS7RW35VJX/chunks"} {
		if err := os.MkdirAll(filepath.Join(data, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"lock", "wal/00000000", "01HK1BZM80NYSP3QAS7RW35VJX/index"} {
		if err := os.WriteFile(filepath.Join(data, f), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return data
}

func copyTree(t *testing.T, from, to string) {
	t.Helper()
	err := filepath.Walk(from, func(path string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, path)
		if info.IsDir() {
			return os.MkdirAll(filepath.Join(to, rel), 0o755)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(to, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}
