//go:build slicelabels || dedupelabels

package compaction

// fastPathSafe is false: these label implementations keep references to
// the decoded strings, so every block goes through IndexReader.Series.
const fastPathSafe = false
