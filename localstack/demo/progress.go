package demo

import (
	"fmt"
	"io"
	"time"

	"github.com/schollz/progressbar/v3"
)

// progress shows the pipeline's progress: uploads retired (compacted and
// deleted) out of all uploads, and what is going on.
type progress struct {
	bar *progressbar.ProgressBar
}

func newProgress(w io.Writer, total int) *progress {
	if w == nil {
		return &progress{}
	}
	return &progress{bar: progressbar.NewOptions(total,
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetWidth(24),
		progressbar.OptionThrottle(200*time.Millisecond),
		progressbar.OptionClearOnFinish(),
		progressbar.OptionSetDescription("                  uploads retired"),
		progressbar.OptionShowCount(),
		progressbar.OptionSetElapsedTime(true),
		progressbar.OptionSetPredictTime(false),
	)}
}

func (p *progress) update(s state) {
	if p.bar == nil {
		return
	}
	p.bar.Describe(fmt.Sprintf("%17s groups %d/%d done · %d job(s) running · %d live · uploads retired", "",
		s.finished, s.groups, s.running, s.live))
	_ = p.bar.Set(s.retired)
}

func (p *progress) finish() {
	if p.bar != nil {
		_ = p.bar.Finish()
	}
}
