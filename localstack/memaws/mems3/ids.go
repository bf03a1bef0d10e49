package mems3

import (
	"encoding/base64"
	"fmt"
	"strconv"
)

// Identifiers are counters run through a fixed bijection of uint64, so they
// are deterministic and unique for the server's lifetime but, like S3's,
// do not sort in creation order: code that compared version ids to order
// versions would pass against a plain counter and fail against S3.
const (
	idMultiplier = 0x9e3779b97f4a7c15 // odd, so multiplication mod 2^64 is invertible
	versionSalt  = 0x5bd1e9955bd1e995
	uploadSalt   = 0x27d4eb2f165667c5
	nullVersion  = "null"
)

// idInverse is the inverse of idMultiplier mod 2^64 (Newton's iteration
// doubles the number of correct low bits each step: 5 steps give 64).
var idInverse = func() uint64 {
	inv := uint64(idMultiplier)
	for range 5 {
		inv *= 2 - idMultiplier*inv
	}
	return inv
}()

func scramble(n, salt uint64) uint64   { return (n ^ salt) * idMultiplier }
func unscramble(x, salt uint64) uint64 { return (x * idInverse) ^ salt }

// versionID is the id of the n-th version (or delete marker) the server made.
func versionID(n uint64) string { return fmt.Sprintf("%016x", scramble(n, versionSalt)) }

// versionSeq returns the counter value a version id was made from, and
// whether id has the form of one this server hands out.
func versionSeq(id string) (uint64, bool) {
	if len(id) != 16 {
		return 0, false
	}
	x, err := strconv.ParseUint(id, 16, 64)
	if err != nil || fmt.Sprintf("%016x", x) != id {
		return 0, false
	}
	return unscramble(x, versionSalt), true
}

// wellFormedVersionID says whether S3 would parse id as a version id (and
// so answer NoSuchVersion rather than InvalidArgument when it is unknown).
func wellFormedVersionID(id string) bool {
	if id == nullVersion {
		return true
	}
	_, ok := versionSeq(id)
	return ok
}

func uploadID(n uint64) string {
	return fmt.Sprintf("mpu-%016x", scramble(n, uploadSalt))
}

func requestID(n uint64) string { return fmt.Sprintf("%016X", n) }

func hostID(reqID string) string {
	return base64.StdEncoding.EncodeToString([]byte("mems3/" + reqID))
}
