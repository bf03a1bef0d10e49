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
