package mems3

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
)

var crlf = []byte("\r\n")

// readPayload reads a whole request body, undoing the aws-chunked framing
// the SDK uses for trailing checksums over TLS (and SigV4 streaming
// uploads use with chunk signatures). It returns the payload and the
// trailers. It must not be called with the server lock held: the body may
// still be arriving.
func readPayload(r *http.Request) ([]byte, map[string]string, *s3Error) {
	if r.Body == nil {
		return nil, nil, nil
	}
	raw, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, nil, newError(http.StatusBadRequest, "IncompleteBody",
			"You did not provide the number of bytes specified by the Content-Length HTTP header: "+err.Error())
	}
	contentSHA := r.Header.Get("X-Amz-Content-Sha256")
	if !awsChunked(r.Header) {
		if len(contentSHA) == 64 {
			if sum := sha256.Sum256(raw); !strings.EqualFold(hex.EncodeToString(sum[:]), contentSHA) {
				return nil, nil, newError(http.StatusBadRequest, "XAmzContentSHA256Mismatch",
					"The provided 'x-amz-content-sha256' header does not match what was computed.")
			}
		}
		return raw, nil, nil
	}
	data, trailers, err := decodeAWSChunked(raw)
	if err != nil {
		return nil, nil, newError(http.StatusBadRequest, "InvalidRequest", "Malformed aws-chunked body: "+err.Error())
	}
	if v := r.Header.Get("X-Amz-Decoded-Content-Length"); v != "" {
		if n, err := strconv.ParseInt(v, 10, 64); err != nil || n != int64(len(data)) {
			return nil, nil, newError(http.StatusBadRequest, "IncompleteBody",
				fmt.Sprintf("x-amz-decoded-content-length is %s but the aws-chunked body decodes to %d bytes", v, len(data)))
		}
	}
	return data, trailers, nil
}

// awsChunked says whether a body is aws-chunked framed.
func awsChunked(h http.Header) bool {
	for _, v := range h.Values("Content-Encoding") {
		for _, e := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(e), "aws-chunked") {
				return true
			}
		}
	}
	return strings.HasPrefix(h.Get("X-Amz-Content-Sha256"), "STREAMING-")
}

// storedContentEncoding is the Content-Encoding S3 keeps: the request's,
// without the aws-chunked transfer framing.
func storedContentEncoding(h http.Header) string {
	var kept []string
	for _, v := range h.Values("Content-Encoding") {
		for _, e := range strings.Split(v, ",") {
			if e = strings.TrimSpace(e); e != "" && !strings.EqualFold(e, "aws-chunked") {
				kept = append(kept, e)
			}
		}
	}
	return strings.Join(kept, ",")
}

// decodeAWSChunked undoes aws-chunked framing:
//
//	<hex size>[;chunk-signature=<sig>]\r\n<data>\r\n ... 0[;...]\r\n
//	<trailer name>:<value>\r\n ... \r\n
//
// Chunk signatures and the trailer signature are not checked (requests are
// not authenticated); the framing is.
func decodeAWSChunked(raw []byte) ([]byte, map[string]string, error) {
	var out []byte
	rest := raw
	for {
		line, after, ok := bytes.Cut(rest, crlf)
		if !ok {
			return nil, nil, errors.New("chunk header without CRLF")
		}
		sizeField, _, _ := bytes.Cut(line, []byte(";"))
		size, err := strconv.ParseUint(strings.TrimSpace(string(sizeField)), 16, 62)
		if err != nil {
			return nil, nil, fmt.Errorf("chunk size %q: %w", sizeField, err)
		}
		rest = after
		if size == 0 {
			break
		}
		if uint64(len(rest)) < size+2 || !bytes.Equal(rest[size:size+2], crlf) {
			return nil, nil, fmt.Errorf("chunk of %d bytes is truncated or not followed by CRLF", size)
		}
		out = append(out, rest[:size]...)
		rest = rest[size+2:]
	}
	trailers := map[string]string{}
	for len(rest) > 0 {
		line, after, ok := bytes.Cut(rest, crlf)
		if !ok {
			line, after = rest, nil
		}
		rest = after
		if len(line) == 0 {
			break
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			return nil, nil, fmt.Errorf("trailer line %q has no colon", line)
		}
		trailers[strings.ToLower(strings.TrimSpace(string(name)))] = strings.TrimSpace(string(value))
	}
	if out == nil {
		out = []byte{}
	}
	return out, trailers, nil
}
