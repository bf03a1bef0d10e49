package mems3

import (
	"fmt"
	"net/http"
)

// s3Error is an error response as S3 writes it: an HTTP status, the
// <Error><Code> the SDK maps to a typed error, and the extra elements and
// headers S3 adds for some codes (the key, the delete-marker header).
type s3Error struct {
	status  int
	code    string
	message string
	fields  [][2]string // extra <Error> elements, in order
	header  http.Header // extra response headers
}

func (e *s3Error) Error() string {
	return fmt.Sprintf("%d %s: %s", e.status, e.code, e.message)
}

func newError(status int, code, message string) *s3Error {
	return &s3Error{status: status, code: code, message: message}
}

// with adds an element to the error document.
func (e *s3Error) with(name, value string) *s3Error {
	e.fields = append(e.fields, [2]string{name, value})
	return e
}

// withHeader adds a response header.
func (e *s3Error) withHeader(name, value string) *s3Error {
	if e.header == nil {
		e.header = http.Header{}
	}
	e.header.Set(name, value)
	return e
}

func errNoSuchBucket(bucket string) *s3Error {
	return newError(http.StatusNotFound, "NoSuchBucket", "The specified bucket does not exist").with("BucketName", bucket)
}

func errNoSuchKey(key string) *s3Error {
	return newError(http.StatusNotFound, "NoSuchKey", "The specified key does not exist.").with("Key", key)
}

func errNoSuchVersion(key, versionID string) *s3Error {
	return newError(http.StatusNotFound, "NoSuchVersion", "The specified version does not exist.").
		with("Key", key).with("VersionId", versionID)
}

func errNoSuchUpload(uploadID string) *s3Error {
	return newError(http.StatusNotFound, "NoSuchUpload",
		"The specified upload does not exist. The upload ID may be invalid, or the upload may have been aborted or completed.").
		with("UploadId", uploadID)
}

func errInvalidVersionID(versionID string) *s3Error {
	return newError(http.StatusBadRequest, "InvalidArgument", "Invalid version id specified").
		with("ArgumentName", "versionId").with("ArgumentValue", versionID)
}

func errInvalidArgument(name, value, message string) *s3Error {
	return newError(http.StatusBadRequest, "InvalidArgument", message).
		with("ArgumentName", name).with("ArgumentValue", value)
}

func errInvalidRequest(message string) *s3Error {
	return newError(http.StatusBadRequest, "InvalidRequest", message)
}

func errMalformedXML() *s3Error {
	return newError(http.StatusBadRequest, "MalformedXML",
		"The XML you provided was not well-formed or did not validate against our published schema")
}

func errPreconditionFailed(condition string) *s3Error {
	return newError(http.StatusPreconditionFailed, "PreconditionFailed",
		"At least one of the pre-conditions you specified did not hold").with("Condition", condition)
}

func errNotImplemented(what string) *s3Error {
	return newError(http.StatusNotImplemented, "NotImplemented",
		"A header or query you provided implies functionality that is not implemented: "+what)
}

func errBadDigest(algorithm string) *s3Error {
	if algorithm == "MD5" {
		return newError(http.StatusBadRequest, "BadDigest", "The Content-MD5 you specified did not match what we received.")
	}
	return newError(http.StatusBadRequest, "BadDigest",
		fmt.Sprintf("The %s you specified did not match the calculated checksum.", algorithm))
}
