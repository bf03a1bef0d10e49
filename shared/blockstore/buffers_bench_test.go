package blockstore

import (
	"context"
	"fmt"
	"testing"

	"github.com/sluice-dev/sluice/shared/planning"
)

// BenchmarkSplitOutputsHold measures what a split job's outputs hold at
// once (Buffers.Peak) while they are written round robin, each
// perOutput bytes, against the in-memory S3 over HTTP: with each output on
// the uploads' defaults and 4 parts of its own in flight (before
// 2026-12-04), and with planning.OutputBuffers and the job's 4 shared
// slots. It reports both peaks in MiB and their ratio.
//
//	go test ./shared/blockstore -run '^$' -bench SplitOutputsHold -benchtime 1x
func BenchmarkSplitOutputsHold(b *testing.B) {
	const perOutput, write = 48 << 20, 256 << 10
	for _, outputs := range []int{8, 16, 32} {
		b.Run(fmt.Sprintf("outputs=%d", outputs), func(b *testing.B) {
			api, bucket := memBucket(b)
			data := make([]byte, perOutput)
			for i := range data {
				data[i] = byte(i*7 + i>>13)
			}
			run := func(name string, opts UploadOptions) int64 {
				ctx := context.Background()
				ups := make([]*StreamUpload, outputs)
				for i := range ups {
					ups[i] = NewStreamUpload(ctx, api, bucket, fmt.Sprintf("bench/%s/%d/%02d", name, b.N, i), "chunks/000001", opts)
				}
				writeRoundRobin(b, ups, perOutput, write, func(i, off, end int) []byte {
					// Each output's bytes differ, as partitions' do.
					chunk := data[off:end]
					chunk[0] = byte(i)
					return chunk
				})
				return opts.Buffers.Peak()
			}
			for b.Loop() {
				before := run("defaults", UploadOptions{Buffers: NewBuffers(outputs * DefaultUploadParallelism)})
				threshold, part := planning.OutputBuffers(outputs)
				after := run("shared", UploadOptions{MultipartThreshold: threshold, PartSize: part, Buffers: NewBuffers(planning.UploadSlots)})
				b.ReportMetric(float64(before)/(1<<20), "MiB-held-defaults")
				b.ReportMetric(float64(after)/(1<<20), "MiB-held-shared")
				b.ReportMetric(float64(after)/float64(before), "ratio")
			}
		})
	}
}

// planning sizes jobs by the uploads' defaults without importing this
// package (it is pure): up to 8 outputs, OutputBuffers must be them.
func TestOutputBuffersKeepTheUploadDefaults(t *testing.T) {
	for _, outputs := range []int{1, 8} {
		if threshold, part := planning.OutputBuffers(outputs); threshold != DefaultMultipartThreshold || part != DefaultPartSize {
			t.Errorf("OutputBuffers(%d) = %d, %d; want the uploads' defaults %d, %d", outputs, threshold, part, DefaultMultipartThreshold, DefaultPartSize)
		}
	}
	if _, part := planning.OutputBuffers(64); part < MinPartSize {
		t.Errorf("parts of %d bytes for 64 outputs, under S3's smallest part (%d)", part, MinPartSize)
	}
}
