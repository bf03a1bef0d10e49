package memsqs

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
)

// Identifiers are built from the server's counters only, so that the same
// requests in the same order give the same identifiers (and Digest).

// messageID formats the n-th message id as a version-4-shaped UUID.
func messageID(n uint64) string {
	return fmt.Sprintf("%08x-%04x-4%03x-8%03x-%012x", n>>48, (n>>32)&0xffff, 0, 0, n&0xffffffffffff)
}

// requestID formats the n-th request id, in a range of UUIDs apart from
// message ids so the two are never confused in a log.
func requestID(n uint64) string {
	return fmt.Sprintf("%08x-%04x-4%03x-a%03x-%012x", n>>48, (n>>32)&0xffff, 0, 0, n&0xffffffffffff)
}

// sequenceNumber formats a FIFO sequence number with SQS's 20 digits, so
// that later numbers also sort later as strings.
func sequenceNumber(n uint64) string {
	return fmt.Sprintf("%020d", n)
}

// handleRef is what a receipt handle names: the queue incarnation, the
// message (by its serial in that queue) and which receive issued it.
type handleRef struct {
	queue, message, receipt uint64
}

// receiptHandle encodes r with a checksum, so that a truncated or edited
// handle is recognised as malformed rather than as some other message's.
func receiptHandle(r handleRef) string {
	payload := fmt.Sprintf("memsqs:%d:%d:%d", r.queue, r.message, r.receipt)
	sum := sha256.Sum256([]byte(payload))
	return base64.StdEncoding.EncodeToString([]byte(payload + ":" + hex.EncodeToString(sum[:8])))
}

// parseReceiptHandle reverses receiptHandle; ok is false for anything
// receiptHandle did not produce.
func parseReceiptHandle(h string) (r handleRef, ok bool) {
	raw, err := base64.StdEncoding.DecodeString(h)
	if err != nil {
		return handleRef{}, false
	}
	parts := strings.Split(string(raw), ":")
	if len(parts) != 5 || parts[0] != "memsqs" {
		return handleRef{}, false
	}
	var n [3]uint64
	for i := range n {
		if n[i], err = strconv.ParseUint(parts[i+1], 10, 64); err != nil {
			return handleRef{}, false
		}
	}
	r = handleRef{queue: n[0], message: n[1], receipt: n[2]}
	if receiptHandle(r) != h {
		return handleRef{}, false
	}
	return r, true
}
