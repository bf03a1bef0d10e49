//go:build !slicelabels && !dedupelabels

package compaction

// fastPathSafe: with the default stringlabels implementation,
// ScratchBuilder.Labels copies names and values, so label sets decoded by
// fastLabels never alias its mapping, which closes when PopulateBlock
// returns. (slicelabels would keep aliasing it; dedupelabels needs the
// reader's symbol table.)
const fastPathSafe = true
