package mems3

import (
	"bytes"
	"crypto/md5"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"fmt"
	"hash"
	"hash/crc32"
	"hash/crc64"
	"net/http"
	"strings"
)

// Checksum types as S3 names them in x-amz-checksum-type.
const (
	fullObject = "FULL_OBJECT"
	composite  = "COMPOSITE"
)

// crc64NVMEPoly is the reflected CRC-64/NVME polynomial, the form
// hash/crc64 takes; the SDK's internal checksum package uses the same.
const crc64NVMEPoly = 0x9a6c9329ac4bc9b5

// checksumAlgorithms are the flexible checksums S3 accepts that the
// standard library can compute (XXHASH* are not among them).
var checksumAlgorithms = []string{"CRC32", "CRC32C", "CRC64NVME", "SHA1", "SHA256", "SHA512", "MD5"}

var (
	crc32cTable    = crc32.MakeTable(crc32.Castagnoli)
	crc64NVMETable = crc64.MakeTable(crc64NVMEPoly)
)

// checksum is the additional checksum S3 keeps with an object version or
// part. value is base64 of the big-endian digest; a composite multipart
// checksum carries S3's "-<parts>" suffix.
type checksum struct {
	alg   string // "" when there is none
	value string
	typ   string
}

func newHash(alg string) hash.Hash {
	switch alg {
	case "CRC32":
		return crc32.NewIEEE()
	case "CRC32C":
		return crc32.New(crc32cTable)
	case "CRC64NVME":
		return crc64.New(crc64NVMETable)
	case "SHA1":
		return sha1.New()
	case "SHA256":
		return sha256.New()
	case "SHA512":
		return sha512.New()
	case "MD5":
		return md5.New()
	}
	panic("mems3: no hash for checksum algorithm " + alg)
}

func knownAlgorithm(alg string) bool {
	for _, a := range checksumAlgorithms {
		if a == alg {
			return true
		}
	}
	return false
}

// crcAlgorithm says whether alg can be a multipart FULL_OBJECT checksum
// (S3 allows it only for the CRCs, which combine linearly).
func crcAlgorithm(alg string) bool {
	return alg == "CRC32" || alg == "CRC32C" || alg == "CRC64NVME"
}

func rawDigest(alg string, data []byte) []byte {
	h := newHash(alg)
	h.Write(data)
	return h.Sum(nil)
}

func base64Digest(alg string, data []byte) string {
	return base64.StdEncoding.EncodeToString(rawDigest(alg, data))
}

// fullChecksum is the FULL_OBJECT checksum of data.
func fullChecksum(alg string, data []byte) checksum {
	return checksum{alg: alg, value: base64Digest(alg, data), typ: fullObject}
}

// compositeChecksum is S3's multipart checksum: the digest of the
// concatenated raw part digests, followed by "-<number of parts>".
func compositeChecksum(alg string, partValues []string) (checksum, error) {
	h := newHash(alg)
	for i, v := range partValues {
		raw, err := base64.StdEncoding.DecodeString(v)
		if err != nil {
			return checksum{}, fmt.Errorf("part %d checksum %q: %w", i+1, v, err)
		}
		h.Write(raw)
	}
	value := fmt.Sprintf("%s-%d", base64.StdEncoding.EncodeToString(h.Sum(nil)), len(partValues))
	return checksum{alg: alg, value: value, typ: composite}, nil
}

func checksumHeader(alg string) string { return "x-amz-checksum-" + strings.ToLower(alg) }

// requestChecksum returns the flexible checksum a request carries for its
// payload, in a header or (aws-chunked) a trailer. alg is "" when there is
// none. S3 refuses more than one algorithm and algorithms it does not know.
func requestChecksum(h http.Header, trailers map[string]string) (alg, value string, err *s3Error) {
	for name := range h {
		lower := strings.ToLower(name)
		rest, ok := strings.CutPrefix(lower, "x-amz-checksum-")
		if !ok || rest == "algorithm" || rest == "type" || rest == "mode" {
			continue
		}
		if !knownAlgorithm(strings.ToUpper(rest)) {
			return "", "", errInvalidRequest("The algorithm specified in " + name + " is not supported.")
		}
	}
	found := 0
	for _, a := range checksumAlgorithms {
		v := h.Get(checksumHeader(a))
		if tv, ok := trailers[checksumHeader(a)]; ok {
			v = tv
		}
		if v == "" {
			continue
		}
		found++
		alg, value = a, v
	}
	if found > 1 {
		return "", "", errInvalidRequest("Expecting a single x-amz-checksum- header. Multiple checksum Types are not allowed.")
	}
	if declared := strings.ToLower(h.Get("X-Amz-Trailer")); declared != "" && strings.HasPrefix(declared, "x-amz-checksum-") {
		if _, ok := trailers[declared]; !ok {
			return "", "", errInvalidRequest("The request declared trailer " + declared + " but its body carried none.")
		}
	}
	if sdk := strings.ToUpper(h.Get("X-Amz-Sdk-Checksum-Algorithm")); sdk != "" {
		if alg == "" {
			return "", "", errInvalidRequest("x-amz-sdk-checksum-algorithm specified, but no corresponding x-amz-checksum-* or x-amz-trailer headers were found.")
		}
		if sdk != alg {
			return "", "", errInvalidRequest(fmt.Sprintf("Value for x-amz-sdk-checksum-algorithm header is invalid: %s, but the checksum sent is %s.", sdk, alg))
		}
	}
	return alg, value, nil
}

// verifyChecksum checks a base64 checksum the client sent against data.
func verifyChecksum(alg, value string, data []byte) *s3Error {
	want, err := base64.StdEncoding.DecodeString(value)
	if err != nil || len(want) != newHash(alg).Size() {
		return errInvalidRequest(fmt.Sprintf("Value for %s header is invalid.", checksumHeader(alg)))
	}
	if !bytes.Equal(want, rawDigest(alg, data)) {
		return errBadDigest(alg)
	}
	return nil
}

// verifyContentMD5 checks the Content-MD5 header, when there is one.
func verifyContentMD5(h http.Header, data []byte) *s3Error {
	v := h.Get("Content-Md5")
	if v == "" {
		return nil
	}
	want, err := base64.StdEncoding.DecodeString(v)
	if err != nil || len(want) != md5.Size {
		return newError(http.StatusBadRequest, "InvalidDigest", "The Content-MD5 you specified was invalid.")
	}
	if got := md5.Sum(data); !bytes.Equal(want, got[:]) {
		return errBadDigest("MD5")
	}
	return nil
}

// payloadChecksum verifies the integrity headers of a request payload
// (Content-MD5 and a flexible checksum) and returns the checksum S3 keeps:
// the one sent, or one S3 computes with defaultAlg when none was.
func payloadChecksum(h http.Header, trailers map[string]string, data []byte, defaultAlg string) (checksum, *s3Error) {
	if err := verifyContentMD5(h, data); err != nil {
		return checksum{}, err
	}
	alg, value, err := requestChecksum(h, trailers)
	if err != nil {
		return checksum{}, err
	}
	if alg == "" {
		return fullChecksum(defaultAlg, data), nil
	}
	if err := verifyChecksum(alg, value, data); err != nil {
		return checksum{}, err
	}
	return checksum{alg: alg, value: value, typ: fullObject}, nil
}

// setChecksumHeaders writes x-amz-checksum-<alg> and x-amz-checksum-type.
func setChecksumHeaders(h http.Header, c checksum) {
	if c.alg == "" {
		return
	}
	h.Set(checksumHeader(c.alg), c.value)
	if c.typ != "" {
		h.Set("x-amz-checksum-type", c.typ)
	}
}

// verifyPayload checks the integrity headers of a request body that is
// not object data (DeleteObjects, configuration documents).
func verifyPayload(h http.Header, trailers map[string]string, data []byte) *s3Error {
	if err := verifyContentMD5(h, data); err != nil {
		return err
	}
	alg, value, err := requestChecksum(h, trailers)
	if err != nil || alg == "" {
		return err
	}
	return verifyChecksum(alg, value, data)
}
