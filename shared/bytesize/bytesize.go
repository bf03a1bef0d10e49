// Package bytesize renders byte counts for people: one formatter for the
// CLI's tables and the planner's sizing reasons.
package bytesize

import "fmt"

// IEC renders a byte count in IEC units ("512 B", "1.5 MiB").
func IEC(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
