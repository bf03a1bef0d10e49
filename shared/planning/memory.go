package planning

import "fmt"

// A job's memory, as the engine spends it (docs/block-engine.md, "Memory
// of a job"). The chunk streams it reads cost a 1 MiB buffer each; what
// grows with the job is its outputs: each writes its chunk segments to S3
// while the merge goes on (blockstore.StreamUpload), holding a segment's
// bytes until it is known to need a multipart upload, then one part while
// it fills, and each has an index writer. A split job writes all its
// partitions at once, so before OutputBuffers its memory grew with N (a
// split into 16 needed ≈ 2.6 GiB, into 32 ≈ 5 GiB).
const (
	// OutputBufferBudget is what the outputs of one job may hold of chunk
	// bytes together, however many there are: a job of up to 8 outputs
	// keeps the uploads' defaults (64 MiB held before a multipart upload,
	// parts of 16 MiB), more outputs share it.
	OutputBufferBudget = 640 << 20
	// UploadSlots is how many parts a job sends at once, over all its
	// outputs.
	UploadSlots = 4
	// JobBaseMemory is a job's memory besides its outputs: the runtime,
	// the SDK, the merge's iterators and the source streams' buffers.
	JobBaseMemory = 160 << 20
	// OutputIndexMemory is one output's index writer (its buffers and
	// tables), measured at ≈ 36 MiB an output by make bench-scale.
	OutputIndexMemory = 36 << 20
	// DefaultJobMemoryBytes is the memory a job is sized for when
	// SLUICE_JOB_MEMORY_BYTES is not set: the compact function's 4 GiB
	// less 512 MiB for the Go collector's headroom.
	DefaultJobMemoryBytes = 3584 << 20

	maxHeldBytes   = 64 << 20 // blockstore.DefaultMultipartThreshold
	maxPartBytes   = 16 << 20 // blockstore.DefaultPartSize
	minPartBytes   = 5 << 20  // S3's smallest part but the last
	bufferRounding = 1 << 20
)

// OutputBuffers is how a job that writes up to outputs objects at once
// streams each: a segment under threshold bytes is one PUT, a bigger one
// goes in parts of partSize. Each output holds at most threshold +
// partSize, and all of them OutputBufferBudget (at least 2 × 5 MiB an
// output, S3's smallest part). The answer depends on outputs alone, so
// every attempt of a job writes the same objects (an object's checksum
// depends on its parts, and a retry adopts what an earlier attempt wrote
// only if it is the same).
func OutputBuffers(outputs int) (threshold, partSize int64) {
	share := int64(OutputBufferBudget) / int64(max(outputs, 1)) / bufferRounding * bufferRounding
	partSize = min(maxPartBytes, max(minPartBytes, share/2/bufferRounding*bufferRounding))
	threshold = max(partSize, min(maxHeldBytes, share-partSize))
	return threshold, partSize
}

// JobMemory estimates the memory of a job that writes outputs blocks at
// once: its base, each output's index writer and held chunk bytes, and
// the parts in flight. A segment sent in one PUT is sent from the parts
// it is held in, not copied.
// Source indexes are mapped files, not counted: the kernel can drop their
// pages (and Lambda's /tmp is a disk, not the function's memory).
func JobMemory(outputs int) uint64 {
	outputs = max(outputs, 1)
	threshold, part := OutputBuffers(outputs)
	return JobBaseMemory + uint64(outputs)*(OutputIndexMemory+uint64(threshold+part)) + UploadSlots*uint64(part)
}

// Memory is the job's JobMemory, from the outputs it writes at once.
func (e JobEstimate) Memory() uint64 { return JobMemory(e.Outputs) }

func memoryReason(e JobEstimate, budget uint64) string {
	what := fmt.Sprintf("partition %d of %d", e.Partition, e.Partitions)
	if e.Outputs > 1 {
		what = fmt.Sprintf("the job writing %d partitions", e.Outputs)
	}
	return fmt.Sprintf("%s needs about %s of memory, over the %s budget", what, bytesString(e.Memory()), bytesString(budget))
}
