package s3errors

import (
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// responseError is what the SDK returns: an API error (code, possibly
// empty for a HEAD) inside a response error carrying the status.
func responseError(status int, code string) error {
	var inner error = &smithy.GenericAPIError{Code: code, Message: "m"}
	if code == "" {
		inner = errors.New("http response error with no body")
	}
	return fmt.Errorf("operation HeadObject: %w", &smithyhttp.ResponseError{
		Response: &smithyhttp.Response{Response: &http.Response{StatusCode: status}},
		Err:      inner,
	})
}

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want Kind
	}{
		{"nil", nil, Other},
		{"plain error", errors.New("connection reset"), Other},
		{"GET of a missing key", responseError(404, "NoSuchKey"), NotFound},
		{"GET of a missing version", responseError(404, "NoSuchVersion"), NotFound},
		{"HEAD: a status and no code", responseError(404, ""), NotFound},
		{"emulator: code without a 404", &smithy.GenericAPIError{Code: "NotFound"}, NotFound},
		{"If-None-Match lost", responseError(412, "PreconditionFailed"), PreconditionFailed},
		{"conditional write in flight", responseError(409, "ConditionalRequestConflict"), Conflict},
		{"slow down", responseError(503, "SlowDown"), Throttled},
		{"range past the end", responseError(416, "InvalidRange"), OutOfRange},
		{"range past the end, no code", responseError(416, ""), OutOfRange},
		{"access denied", responseError(403, "AccessDenied"), Other},
		{"server error", responseError(500, "InternalError"), Other},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Classify(tc.err); got != tc.want {
				t.Errorf("Classify = %v, want %v", got, tc.want)
			}
		})
	}
}
