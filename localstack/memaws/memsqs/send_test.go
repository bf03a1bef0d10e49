package memsqs_test

import (
	"bytes"
	"crypto/md5"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

func strAttr(dataType, v string) types.MessageAttributeValue {
	return types.MessageAttributeValue{DataType: aws.String(dataType), StringValue: aws.String(v)}
}

// TestMessageAttributeMD5 checks MD5OfMessageAttributes against digests
// published for SQS's algorithm (by the aws-md5-of-message-attributes npm
// package), on send and on receive; the SDK validates the body's MD5 on
// both itself.
func TestMessageAttributeMD5(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	url := e.createQueue("md5", nil)
	str := strAttr("String", "attribValue 1")
	num := strAttr("Number.float", "4563442423554324324264524243.32543234")
	bin := types.MessageAttributeValue{DataType: aws.String("Binary"), BinaryValue: []byte("Hello binary world!")}
	tests := []struct {
		name  string
		attrs map[string]types.MessageAttributeValue
		want  string
	}{
		{"String", map[string]types.MessageAttributeValue{"attribName1": str}, "19e27d4e946b072f3f58da80d94fd778"},
		{"Number with a custom type", map[string]types.MessageAttributeValue{"customNumberTypeAttrib": num}, "9fe1b90bbd9965bdf77bac517c7d2495"},
		{"Binary", map[string]types.MessageAttributeValue{"binaryAttribute": bin}, "31a92b15d92f8db860eda32aceb656c3"},
		{"all three", map[string]types.MessageAttributeValue{"attribName1": str, "customNumberTypeAttrib": num, "binaryAttribute": bin}, "c932db14a896c663f83c260297d594ff"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			body := "body of " + tc.name + " ✓"
			out, err := e.c.SendMessage(e.ctx, &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(body), MessageAttributes: tc.attrs})
			if err != nil {
				t.Fatalf("SendMessage: %v", err)
			}
			if got := aws.ToString(out.MD5OfMessageAttributes); got != tc.want {
				t.Errorf("send MD5OfMessageAttributes = %s, want %s", got, tc.want)
			}
			msgs := e.receive(url, 1)
			if len(msgs) != 1 {
				t.Fatalf("received %d messages", len(msgs))
			}
			m := msgs[0]
			if got := aws.ToString(m.MD5OfMessageAttributes); got != tc.want {
				t.Errorf("receive MD5OfMessageAttributes = %s, want %s", got, tc.want)
			}
			sum := md5.Sum([]byte(body))
			if aws.ToString(m.Body) != body || aws.ToString(m.MD5OfBody) != hex.EncodeToString(sum[:]) {
				t.Errorf("received body %q with MD5 %s", aws.ToString(m.Body), aws.ToString(m.MD5OfBody))
			}
			for name, a := range tc.attrs {
				got := m.MessageAttributes[name]
				if aws.ToString(got.DataType) != aws.ToString(a.DataType) || aws.ToString(got.StringValue) != aws.ToString(a.StringValue) || !bytes.Equal(got.BinaryValue, a.BinaryValue) {
					t.Errorf("attribute %s came back as %+v", name, got)
				}
			}
			if _, err := e.c.DeleteMessage(e.ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: m.ReceiptHandle}); err != nil {
				t.Fatal(err)
			}
		})
	}

	// A receive's digest covers the attributes it returns.
	if _, err := e.c.SendMessage(e.ctx, &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String("x"),
		MessageAttributes: map[string]types.MessageAttributeValue{"attribName1": str, "binaryAttribute": bin}}); err != nil {
		t.Fatal(err)
	}
	out, err := e.c.ReceiveMessage(e.ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), MessageAttributeNames: []string{"attribName1"}})
	if err != nil || len(out.Messages) != 1 {
		t.Fatalf("receive: %v, %v", out, err)
	}
	if m := out.Messages[0]; len(m.MessageAttributes) != 1 || aws.ToString(m.MD5OfMessageAttributes) != "19e27d4e946b072f3f58da80d94fd778" {
		t.Errorf("receive of attribName1: attributes %v, MD5 %s", m.MessageAttributes, aws.ToString(m.MD5OfMessageAttributes))
	}
}

// TestSDKValidatesBodyMD5 shows that the MD5s above matter: the SDK
// rejects a response whose MD5OfMessageBody is wrong.
func TestSDKValidatesBodyMD5(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	url := e.createQueue("md5", nil)
	sum := md5.Sum([]byte("hello"))
	good := []byte(hex.EncodeToString(sum[:]))
	corrupt := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := httptest.NewRecorder()
		e.srv.ServeHTTP(rec, r)
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(bytes.ReplaceAll(rec.Body.Bytes(), good, bytes.Repeat([]byte("0"), 32)))
	})
	_, err := newClient(corrupt).SendMessage(e.ctx, &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String("hello")})
	if err == nil || !strings.Contains(err.Error(), "checksum") {
		t.Fatalf("SendMessage with a corrupted MD5: %v, want a checksum error", err)
	}
}

func TestSendValidation(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	url := e.createQueue("limits", nil)
	small := e.createQueue("small", map[string]string{"MaximumMessageSize": "1024"})
	const max = 256 * 1024
	attrs11 := map[string]types.MessageAttributeValue{}
	for i := range 11 {
		attrs11[string(rune('a'+i))] = strAttr("String", "v")
	}
	tests := []struct {
		name  string
		queue string
		in    sqs.SendMessageInput
		code  string
		check func(error) bool
	}{
		{"body of 256 KiB", url, sqs.SendMessageInput{MessageBody: aws.String(strings.Repeat("b", max))}, "", nil},
		{"body of 256 KiB + 1", url, sqs.SendMessageInput{MessageBody: aws.String(strings.Repeat("b", max+1))}, "InvalidParameterValue", nil},
		{"body and attributes of 256 KiB", url, sqs.SendMessageInput{MessageBody: aws.String(strings.Repeat("b", max-11)),
			MessageAttributes: map[string]types.MessageAttributeValue{"n": strAttr("String", "vvvv")}}, "", nil},
		{"body and attributes of 256 KiB + 1", url, sqs.SendMessageInput{MessageBody: aws.String(strings.Repeat("b", max-10)),
			MessageAttributes: map[string]types.MessageAttributeValue{"n": strAttr("String", "vvvv")}}, "InvalidParameterValue", nil},
		{"queue's MaximumMessageSize", small, sqs.SendMessageInput{MessageBody: aws.String(strings.Repeat("b", 1025))}, "InvalidParameterValue", nil},
		{"empty body", url, sqs.SendMessageInput{MessageBody: aws.String("")}, "InvalidParameterValue", nil},
		{"NUL in the body", url, sqs.SendMessageInput{MessageBody: aws.String("a\x00b")}, "InvalidMessageContents", isType[*types.InvalidMessageContents]},
		{"11 attributes", url, sqs.SendMessageInput{MessageBody: aws.String("x"), MessageAttributes: attrs11}, "InvalidParameterValue", nil},
		{"reserved attribute name", url, sqs.SendMessageInput{MessageBody: aws.String("x"),
			MessageAttributes: map[string]types.MessageAttributeValue{"AWS.trace": strAttr("String", "v")}}, "InvalidParameterValue", nil},
		{"unknown data type", url, sqs.SendMessageInput{MessageBody: aws.String("x"),
			MessageAttributes: map[string]types.MessageAttributeValue{"a": strAttr("Blob", "v")}}, "InvalidParameterValue", nil},
		{"Number that is not", url, sqs.SendMessageInput{MessageBody: aws.String("x"),
			MessageAttributes: map[string]types.MessageAttributeValue{"a": strAttr("Number", "12a")}}, "InvalidParameterValue", nil},
		{"Number", url, sqs.SendMessageInput{MessageBody: aws.String("x"),
			MessageAttributes: map[string]types.MessageAttributeValue{"a": strAttr("Number", "-1.5e3")}}, "", nil},
		{"empty String", url, sqs.SendMessageInput{MessageBody: aws.String("x"),
			MessageAttributes: map[string]types.MessageAttributeValue{"a": strAttr("String", "")}}, "InvalidParameterValue", nil},
		{"delay over 900 s", url, sqs.SendMessageInput{MessageBody: aws.String("x"), DelaySeconds: 901}, "InvalidParameterValue", nil},
		{"dedup id on a standard queue", url, sqs.SendMessageInput{MessageBody: aws.String("x"), MessageDeduplicationId: aws.String("d")}, "InvalidParameterValue", nil},
		{"group id on a standard queue (fair queue)", url, sqs.SendMessageInput{MessageBody: aws.String("x"), MessageGroupId: aws.String("tenant-a")}, "", nil},
		{"trace header", url, sqs.SendMessageInput{MessageBody: aws.String("x"), MessageSystemAttributes: map[string]types.MessageSystemAttributeValue{
			"AWSTraceHeader": {DataType: aws.String("String"), StringValue: aws.String("Root=1-5759e988-bd862e3fe1be46a994272793")}}}, "", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.in
			in.QueueUrl = aws.String(tc.queue)
			_, err := e.c.SendMessage(e.ctx, &in)
			if tc.code == "" {
				if err != nil {
					t.Fatalf("SendMessage: %v", err)
				}
				return
			}
			if got := errorCode(err); got != tc.code {
				t.Fatalf("SendMessage: %v: code %q, want %q", err, got, tc.code)
			}
			if tc.check != nil && !tc.check(err) {
				t.Fatalf("SendMessage: %v (%T) is not of the SDK's typed error", err, err)
			}
		})
	}
}

func TestDelay(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	std := e.createQueue("std", map[string]string{"DelaySeconds": "10"})
	if _, err := e.c.SendMessage(e.ctx, &sqs.SendMessageInput{QueueUrl: aws.String(std), MessageBody: aws.String("30 s"), DelaySeconds: 30}); err != nil {
		t.Fatal(err)
	}
	e.send(std, "queue default")
	if got := e.receive(std, 10); len(got) != 0 {
		t.Fatalf("at 0 s: %v", bodies(got))
	}
	e.advance(10 * time.Second)
	if got := bodies(e.receive(std, 10)); len(got) != 1 || got[0] != "queue default" {
		t.Fatalf("at 10 s: %v, want the queue's delay over", got)
	}
	e.advance(20 * time.Second)
	if got := bodies(e.receive(std, 10)); len(got) != 1 || got[0] != "30 s" {
		t.Fatalf("at 30 s: %v", got)
	}

	fifo := e.fifoQueue("f.fifo", map[string]string{"DelaySeconds": "5"})
	_, err := e.c.SendMessage(e.ctx, &sqs.SendMessageInput{QueueUrl: aws.String(fifo), MessageBody: aws.String("x"), MessageGroupId: aws.String("g"), DelaySeconds: 1})
	if errorCode(err) != "InvalidParameterValue" {
		t.Fatalf("per-message delay on a FIFO queue: %v, want InvalidParameterValue", err)
	}
	e.sendGroup(fifo, "g", "fifo delayed")
	if got := e.receive(fifo, 10); len(got) != 0 {
		t.Fatalf("FIFO at 0 s: %v", bodies(got))
	}
	e.advance(5 * time.Second)
	if got := bodies(e.receive(fifo, 10)); len(got) != 1 {
		t.Fatalf("FIFO at 5 s: %v", got)
	}
}

func TestSendMessageBatch(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	url := e.createQueue("batch", nil)
	fifo := e.fifoQueue("batch.fifo", nil)
	entry := func(id, body string) types.SendMessageBatchRequestEntry {
		return types.SendMessageBatchRequestEntry{Id: aws.String(id), MessageBody: aws.String(body)}
	}
	bad := entry("bad", "x")
	bad.MessageAttributes = map[string]types.MessageAttributeValue{"a": strAttr("Number", "NaN")}
	out, err := e.c.SendMessageBatch(e.ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(url),
		Entries: []types.SendMessageBatchRequestEntry{entry("one", "1"), bad, entry("two", "2")}})
	if err != nil {
		t.Fatalf("SendMessageBatch: %v", err)
	}
	if len(out.Successful) != 2 || len(out.Failed) != 1 {
		t.Fatalf("Successful %d, Failed %d; want 2 and 1", len(out.Successful), len(out.Failed))
	}
	if f := out.Failed[0]; aws.ToString(f.Id) != "bad" || aws.ToString(f.Code) != "InvalidParameterValue" || !f.SenderFault {
		t.Errorf("Failed = %+v", f)
	}
	if got := bodies(e.receive(url, 10)); strings.Join(got, ",") != "1,2" {
		t.Errorf("received %v, want 1,2", got)
	}

	delayed := entry("delayed", "d")
	delayed.DelaySeconds = 5
	ok := entry("ok", "o")
	ok.MessageGroupId = aws.String("g")
	delayed.MessageGroupId = aws.String("g")
	out, err = e.c.SendMessageBatch(e.ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(fifo), Entries: []types.SendMessageBatchRequestEntry{delayed, ok}})
	if err != nil || len(out.Successful) != 1 || len(out.Failed) != 1 || aws.ToString(out.Failed[0].Id) != "delayed" {
		t.Fatalf("FIFO batch with a per-message delay: %+v, %v", out, err)
	}
	if s := out.Successful[0]; len(aws.ToString(s.SequenceNumber)) != 20 {
		t.Errorf("SequenceNumber = %q", aws.ToString(s.SequenceNumber))
	}

	var eleven []types.SendMessageBatchRequestEntry
	for i := range 11 {
		eleven = append(eleven, entry(string(rune('a'+i)), "x"))
	}
	big := strings.Repeat("b", 200*1024)
	for _, tc := range []struct {
		name    string
		entries []types.SendMessageBatchRequestEntry
		check   func(error) bool
	}{
		{"11 entries", eleven, isType[*types.TooManyEntriesInBatchRequest]},
		{"repeated id", []types.SendMessageBatchRequestEntry{entry("a", "1"), entry("a", "2")}, isType[*types.BatchEntryIdsNotDistinct]},
		{"no entries", []types.SendMessageBatchRequestEntry{}, isType[*types.EmptyBatchRequest]},
		{"bad id", []types.SendMessageBatchRequestEntry{entry("a b", "1")}, isType[*types.InvalidBatchEntryId]},
		{"over 256 KiB together", []types.SendMessageBatchRequestEntry{entry("a", big), entry("b", big)}, isType[*types.BatchRequestTooLong]},
	} {
		_, err := e.c.SendMessageBatch(e.ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: tc.entries})
		if !tc.check(err) {
			t.Errorf("%s: %v (%T)", tc.name, err, err)
		}
	}
	if n := e.attributes(url, types.QueueAttributeNameApproximateNumberOfMessages)["ApproximateNumberOfMessages"]; n != "0" {
		t.Errorf("rejected batches enqueued %s messages", n)
	}
}
