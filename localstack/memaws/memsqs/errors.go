package memsqs

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// Failure is an error a fault function makes a request fail with. Code is
// either the query-protocol code SQS puts in the x-amzn-query-error
// header ("AWS.SimpleQueueService.NonExistentQueue", "InvalidParameterValue",
// "ServiceUnavailable") or the JSON __type shape SQS sends, with or without
// its namespace ("com.amazonaws.sqs#QueueDoesNotExist", "QueueDoesNotExist").
// For an error the SDK models, the other half is filled in, so that the SDK
// decodes it to its typed error (*types.QueueDoesNotExist, …). Status
// defaults to the status SQS uses for that error (400 for unknown codes,
// 500 for InternalError, 503 for ServiceUnavailable); Message to Code.
type Failure struct {
	Code, Message string
	Status        int
}

// apiError is an SQS error response: shape goes into the body's __type,
// code into the x-amzn-query-error header.
type apiError struct {
	shape, code string
	status      int
	message     string
}

func (e *apiError) Error() string { return e.code + ": " + e.message }

// sqsError is one row of the table of errors SQS sends.
type sqsError struct {
	shape, code string
	status      int
}

// knownError finds an error by its shape name or its query code: the
// errors the SDK models (with the query codes and statuses its schema
// gives them) and the common unmodeled ones.
func knownError(name string) (sqsError, bool) {
	for _, e := range []sqsError{
		{"BatchEntryIdsNotDistinct", "AWS.SimpleQueueService.BatchEntryIdsNotDistinct", 400},
		{"BatchRequestTooLong", "AWS.SimpleQueueService.BatchRequestTooLong", 400},
		{"EmptyBatchRequest", "AWS.SimpleQueueService.EmptyBatchRequest", 400},
		{"InvalidAddress", "InvalidAddress", 404},
		{"InvalidAttributeName", "InvalidAttributeName", 400},
		{"InvalidAttributeValue", "InvalidAttributeValue", 400},
		{"InvalidBatchEntryId", "AWS.SimpleQueueService.InvalidBatchEntryId", 400},
		{"InvalidIdFormat", "InvalidIdFormat", 400},
		{"InvalidMessageContents", "InvalidMessageContents", 400},
		{"InvalidSecurity", "InvalidSecurity", 403},
		{"KmsAccessDenied", "KMS.AccessDeniedException", 400},
		{"KmsDisabled", "KMS.DisabledException", 400},
		{"KmsInvalidKeyUsage", "KMS.InvalidKeyUsageException", 400},
		{"KmsInvalidState", "KMS.InvalidStateException", 400},
		{"KmsNotFound", "KMS.NotFoundException", 400},
		{"KmsOptInRequired", "KMS.OptInRequired", 403},
		{"KmsThrottled", "KMS.ThrottlingException", 400},
		{"MessageNotInflight", "AWS.SimpleQueueService.MessageNotInflight", 400},
		{"OverLimit", "OverLimit", 403},
		{"PurgeQueueInProgress", "AWS.SimpleQueueService.PurgeQueueInProgress", 403},
		{"QueueDeletedRecently", "AWS.SimpleQueueService.QueueDeletedRecently", 400},
		{"QueueDoesNotExist", "AWS.SimpleQueueService.NonExistentQueue", 400},
		{"QueueNameExists", "QueueAlreadyExists", 400},
		{"ReceiptHandleIsInvalid", "ReceiptHandleIsInvalid", 404},
		{"RequestThrottled", "RequestThrottled", 403},
		{"ResourceNotFoundException", "ResourceNotFoundException", 404},
		{"TooManyEntriesInBatchRequest", "AWS.SimpleQueueService.TooManyEntriesInBatchRequest", 400},
		{"UnsupportedOperation", "AWS.SimpleQueueService.UnsupportedOperation", 400},
		// Unmodeled: the SDK returns a *smithy.GenericAPIError whose
		// ErrorCode() is the query code.
		{"InvalidParameterValue", "InvalidParameterValue", 400},
		{"MissingParameter", "MissingParameter", 400},
		{"AccessDenied", "AccessDenied", 403},
		{"ThrottlingException", "ThrottlingException", 400},
		{"InternalError", "InternalError", 500},
		{"InternalFailure", "InternalFailure", 500},
		{"ServiceUnavailable", "ServiceUnavailable", 503},
	} {
		if e.shape == name || e.code == name {
			return e, true
		}
	}
	return sqsError{}, false
}

func (f *Failure) apiError() *apiError {
	name := f.Code
	if _, after, ok := strings.Cut(name, "#"); ok {
		name = after
	}
	e := &apiError{shape: name, code: name, status: http.StatusBadRequest, message: f.Message}
	if k, ok := knownError(name); ok {
		e.shape, e.code, e.status = k.shape, k.code, k.status
	}
	if f.Status != 0 {
		e.status = f.Status
	}
	if e.message == "" {
		e.message = f.Code
	}
	return e
}

func writeError(w http.ResponseWriter, e *apiError) {
	fault := "Sender"
	if e.status >= 500 {
		fault = "Receiver"
	}
	b, _ := json.Marshal(struct {
		Type    string `json:"__type"`
		Message string `json:"message"`
	}{"com.amazonaws.sqs#" + e.shape, e.message})
	h := w.Header()
	h.Set("Content-Type", "application/x-amz-json-1.0")
	h.Set("x-amzn-query-error", e.code+";"+fault)
	w.WriteHeader(e.status)
	_, _ = w.Write(b)
}

// newError builds one of the errors of knownError's table.
func newError(name, format string, args ...any) *apiError {
	k, ok := knownError(name)
	if !ok {
		k = sqsError{shape: name, code: name, status: http.StatusBadRequest}
	}
	return &apiError{shape: k.shape, code: k.code, status: k.status, message: fmt.Sprintf(format, args...)}
}

func errQueueDoesNotExist(name string) *apiError {
	return newError("QueueDoesNotExist", "The specified queue %s does not exist.", name)
}

func errInvalidParameter(format string, args ...any) *apiError {
	return newError("InvalidParameterValue", format, args...)
}

func errMissingParameter(name string) *apiError {
	return newError("MissingParameter", "The request must contain the parameter %s.", name)
}

func errInvalidReceiptHandle(h string) *apiError {
	return newError("ReceiptHandleIsInvalid", "The input receipt handle %q is not a valid receipt handle.", h)
}

// errExpiredReceiptHandle is what a FIFO queue answers for a receipt handle
// whose visibility timeout is over or that a later receive superseded.
func errExpiredReceiptHandle(h string) *apiError {
	return errInvalidParameter("Value %s for parameter ReceiptHandle is invalid. Reason: The receipt handle has expired.", h)
}
