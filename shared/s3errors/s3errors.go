// Package s3errors is the one place that says what an S3 error means to
// Sluice: the object or version is not there, a conditional write lost, a
// conditional write raced another in flight, or S3 asked to slow down.
// S3 reports these by HTTP status on some operations (a HEAD has no body,
// so no error code) and by error code on others, and the emulators differ
// in which they send; every caller asks here instead of matching codes.
package s3errors

import (
	"errors"
	"net/http"

	"github.com/aws/smithy-go"
)

// Kind is what an S3 error means.
type Kind int

const (
	// Other is any error not below (including nil).
	Other Kind = iota
	// NotFound: no such key, version or object (404).
	NotFound
	// PreconditionFailed: an If-Match / If-None-Match write lost (412).
	PreconditionFailed
	// Conflict: a conditional write raced another write of the same key
	// in flight (409 ConditionalRequestConflict); retrying settles it.
	Conflict
	// Throttled: S3 asked the caller to slow down (503 SlowDown).
	Throttled
	// OutOfRange: a ranged GET starts past the object's end (416
	// InvalidRange).
	OutOfRange
)

func (k Kind) String() string {
	switch k {
	case NotFound:
		return "not found"
	case PreconditionFailed:
		return "precondition failed"
	case Conflict:
		return "conflict"
	case Throttled:
		return "throttled"
	case OutOfRange:
		return "out of range"
	}
	return "other"
}

// Classify says what err means.
func Classify(err error) Kind {
	if err == nil {
		return Other
	}
	var ae smithy.APIError
	if errors.As(err, &ae) {
		switch ae.ErrorCode() {
		case "NoSuchKey", "NoSuchVersion", "NotFound":
			return NotFound
		case "PreconditionFailed":
			return PreconditionFailed
		case "ConditionalRequestConflict":
			return Conflict
		case "SlowDown", "Throttling", "ThrottlingException", "RequestLimitExceeded":
			return Throttled
		case "InvalidRange":
			return OutOfRange
		}
	}
	var se interface{ HTTPStatusCode() int }
	if errors.As(err, &se) {
		switch se.HTTPStatusCode() {
		case http.StatusNotFound:
			return NotFound
		case http.StatusPreconditionFailed:
			return PreconditionFailed
		case http.StatusConflict:
			return Conflict
		case http.StatusServiceUnavailable:
			return Throttled
		case http.StatusRequestedRangeNotSatisfiable:
			return OutOfRange
		}
	}
	return Other
}

// IsNotFound reports a missing key, version or object.
func IsNotFound(err error) bool { return Classify(err) == NotFound }

// IsPreconditionFailed reports a conditional write that lost.
func IsPreconditionFailed(err error) bool { return Classify(err) == PreconditionFailed }

// IsConflict reports a conditional write that raced another in flight.
func IsConflict(err error) bool { return Classify(err) == Conflict }
