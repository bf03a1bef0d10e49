package messages

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// dedupID fits an id into SQS's 128 allowed characters
// ([A-Za-z0-9!"#$%&'()*+,-./:;<=>?@[\]^_`{|}~]): kept as is when it fits,
// otherwise a readable prefix and a hash of the whole.
func dedupID(id string) string {
	clean := strings.Map(func(r rune) rune {
		if r > 32 && r < 127 {
			return r
		}
		return '_'
	}, id)
	if len(clean) <= 128 && clean == id {
		return clean
	}
	h := sha256.Sum256([]byte(id))
	return clean[:min(len(clean), 80)] + "." + hex.EncodeToString(h[:16])
}

// MaxGroupIDLength is SQS's limit on a FIFO MessageGroupId.
const MaxGroupIDLength = 128

// groupID returns key as a MessageGroupId: itself when it fits, else its
// first characters and a hash of the whole, so one key always maps to one
// group (per-key order holds) and two keys to two. A tenant id may be 150
// characters long (Cortex and Mimir allow it): tenant/ULID does not fit.
func groupID(key string) string {
	if len(key) <= MaxGroupIDLength {
		return key
	}
	h := sha256.Sum256([]byte(key))
	suffix := "~" + hex.EncodeToString(h[:16])
	return key[:MaxGroupIDLength-len(suffix)] + suffix
}
