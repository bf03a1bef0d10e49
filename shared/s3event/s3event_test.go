package s3event

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const block = "01JDQ2Z3Y4X5W6V7T8S9R0QPNM"

func fixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestDecodeFixtures(t *testing.T) {
	awsPut := ObjectCreated{
		Bucket:    "prod-sluice-blocks",
		Key:       "team a/" + block + "/meta.json",
		VersionID: "3HL4kqtJlcpXroDTDmJ.rmSpXd3dIbrHY",
		Size:      1827,
		ETag:      "d41d8cd98f00b204e9800998ecf8427e",
		Sequencer: "0067DA2C8F5B1E3A77",
		EventName: "ObjectCreated:Put",
		EventTime: time.Date(2024, 11, 5, 14, 3, 27, 412e6, time.UTC),
	}
	tests := []struct {
		fixture string
		want    []ObjectCreated
	}{
		{"aws_put_versioned.json", []ObjectCreated{awsPut}},
		{"sns_wrapped_aws_put.json", []ObjectCreated{awsPut}},
		{"aws_multipart_two_records.json", []ObjectCreated{{
			// The second record, an ObjectRemoved, is skipped.
			Bucket:    "example-bucket",
			Key:       "blocks/fake/" + block + "/meta.json",
			VersionID: "096fKKXTRTtl3on89fVO.nfljtsv6qko",
			Size:      1024,
			ETag:      "0123456789abcdef0123456789abcdef-3",
			Sequencer: "0A1B2C3D4E5F678901",
			EventName: "ObjectCreated:CompleteMultipartUpload",
			EventTime: time.Unix(0, 0).UTC(),
		}}},
		{"localstack_put_versioned.json", []ObjectCreated{{
			Bucket:    "sluice-blocks",
			Key:       "team a/" + block + "/meta.json",
			VersionID: "a6d8a3d6-0e1b-4f3c-9f0a-6b1c2d3e4f5a",
			Size:      1827,
			ETag:      "d41d8cd98f00b204e9800998ecf8427e",
			Sequencer: "0055AED6DCD90281E5",
			EventName: "ObjectCreated:Put",
			EventTime: time.Date(2024, 11, 5, 14, 3, 27, 412e6, time.UTC),
		}}},
		{"moto_put.json", []ObjectCreated{{
			// moto: '/' encoded too, no versionId, no sequencer, no zone.
			Bucket:    "sluice-capture-blocks",
			Key:       "team a+b/" + block + "/meta.json",
			Size:      37,
			ETag:      "ed15d9a4899c2b17a756b11d04f593b7",
			EventName: "ObjectCreated:Put",
			EventTime: time.Date(2026, 11, 30, 10, 45, 2, 852596e3, time.UTC),
		}}},
		{"aws_test_event.json", nil},
		{"localstack_test_event.json", nil},
		{"moto_test_event.json", nil},
	}
	for _, tc := range tests {
		t.Run(tc.fixture, func(t *testing.T) {
			got, err := Decode(fixture(t, tc.fixture))
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("Decode = %d records %+v, want %d", len(got), got, len(tc.want))
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("record %d:\n got %+v\nwant %+v", i, got[i], tc.want[i])
				}
			}
		})
	}
}

func TestDecodeTolerates(t *testing.T) {
	tests := []struct {
		name string
		body string
		want ObjectCreated
	}{
		{"s3: prefix on eventName and quoted ETag",
			`{"Records":[{"eventName":"s3:ObjectCreated:Copy","s3":{"bucket":{"name":"b"},"object":{"key":"k","eTag":"\"abc\""}}}]}`,
			ObjectCreated{Bucket: "b", Key: "k", ETag: "abc", EventName: "ObjectCreated:Copy"}},
		{"no eventTime, size or eventSource",
			`{"Records":[{"eventName":"ObjectCreated:Put","s3":{"bucket":{"name":"b"},"object":{"key":"t/x"}}}]}`,
			ObjectCreated{Bucket: "b", Key: "t/x", EventName: "ObjectCreated:Put"}},
		{"size as a string, time with an offset",
			`{"Records":[{"eventName":"ObjectCreated:Put","eventTime":"2024-01-02T03:04:05+02:00","s3":{"bucket":{"name":"b"},"object":{"key":"k","size":"12"}}}]}`,
			ObjectCreated{Bucket: "b", Key: "k", Size: 12, EventName: "ObjectCreated:Put", EventTime: time.Date(2024, 1, 2, 1, 4, 5, 0, time.UTC)}},
		{"zone-less time without fraction",
			`{"Records":[{"eventName":"ObjectCreated:Put","eventTime":"2024-01-02T03:04:05","s3":{"bucket":{"name":"b"},"object":{"key":"k"}}}]}`,
			ObjectCreated{Bucket: "b", Key: "k", EventName: "ObjectCreated:Put", EventTime: time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)}},
		{"encoded plus, percent and unicode",
			`{"Records":[{"eventName":"ObjectCreated:Put","s3":{"bucket":{"name":"b"},"object":{"key":"a%2Bb%25c+d%C3%A4"}}}]}`,
			ObjectCreated{Bucket: "b", Key: "a+b%c dä", EventName: "ObjectCreated:Put"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Decode([]byte(tc.body))
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if len(got) != 1 || got[0] != tc.want {
				t.Fatalf("Decode = %+v, want [%+v]", got, tc.want)
			}
		})
	}
}

func TestDecodeSkipsOtherEvents(t *testing.T) {
	for _, name := range []string{"ObjectRemoved:Delete", "ObjectRemoved:DeleteMarkerCreated", "ObjectTagging:Put", "ObjectRestore:Completed"} {
		body := `{"Records":[{"eventSource":"aws:s3","eventName":"` + name + `","s3":{"bucket":{"name":"b"},"object":{"key":"k"}}}]}`
		got, err := Decode([]byte(body))
		if err != nil || len(got) != 0 {
			t.Errorf("%s: Decode = %+v, %v; want nothing, no error", name, got, err)
		}
	}
	got, err := Decode([]byte(`{"Records":[]}`))
	if err != nil || len(got) != 0 {
		t.Errorf("empty Records: Decode = %+v, %v", got, err)
	}
}

func TestDecodeErrors(t *testing.T) {
	tests := []struct {
		name, body, want string
	}{
		{"empty", ``, "not a JSON object"},
		{"not JSON", `hello`, "not a JSON object"},
		{"array", `[{"Records":[]}]`, "not a JSON object"},
		{"trailing data", `{"Records":[]}}`, "trailing data"},
		{"no Records", `{"foo":1}`, "no Records"},
		{"null Records", `{"Records":null}`, "no Records"},
		{"null", `null`, "no Records"},
		{"Records not a list", `{"Records":{}}`, "not a JSON object"},
		{"other event source", `{"Records":[{"eventSource":"aws:sqs","eventName":"ObjectCreated:Put"}]}`, `eventSource "aws:sqs"`},
		{"no eventName", `{"Records":[{"s3":{"bucket":{"name":"b"},"object":{"key":"k"}}}]}`, "no eventName"},
		{"no s3 section", `{"Records":[{"eventName":"ObjectCreated:Put"}]}`, "without an s3 section"},
		{"no bucket", `{"Records":[{"eventName":"ObjectCreated:Put","s3":{"object":{"key":"k"}}}]}`, "without a bucket name"},
		{"no key", `{"Records":[{"eventName":"ObjectCreated:Put","s3":{"bucket":{"name":"b"},"object":{}}}]}`, "without an object key"},
		{"bad escape", `{"Records":[{"eventName":"ObjectCreated:Put","s3":{"bucket":{"name":"b"},"object":{"key":"a%zz"}}}]}`, "invalid URL escape"},
		{"bad size", `{"Records":[{"eventName":"ObjectCreated:Put","s3":{"bucket":{"name":"b"},"object":{"key":"k","size":1.5}}}]}`, "not a byte count"},
		{"negative size", `{"Records":[{"eventName":"ObjectCreated:Put","s3":{"bucket":{"name":"b"},"object":{"key":"k","size":-1}}}]}`, "not a byte count"},
		{"bad time", `{"Records":[{"eventName":"ObjectCreated:Put","eventTime":"yesterday","s3":{"bucket":{"name":"b"},"object":{"key":"k"}}}]}`, `eventTime "yesterday"`},
		{"SNS with garbage", `{"Type":"Notification","Message":"nope"}`, "SNS message"},
		{"SNS in SNS", `{"Type":"Notification","Message":"{\"Type\":\"Notification\",\"Message\":\"{\\\"Records\\\":[]}\"}"}`, "no Records"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Decode([]byte(tc.body))
			if err == nil {
				t.Fatalf("Decode(%q) = %+v, want an error", tc.body, got)
			}
			if !errors.Is(err, ErrMalformed) {
				t.Errorf("error %q does not wrap ErrMalformed", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not say %q", err, tc.want)
			}
		})
	}
}

// FuzzDecode: Decode never panics, and every record it returns names a
// bucket and a key.
func FuzzDecode(f *testing.F) {
	for _, name := range []string{"aws_put_versioned.json", "moto_put.json", "localstack_put_versioned.json", "aws_test_event.json"} {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		records, err := Decode(body)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		for _, r := range records {
			if r.Bucket == "" || r.Key == "" || !strings.HasPrefix(r.EventName, "ObjectCreated:") || r.Size < 0 {
				t.Fatalf("Decode(%q) returned %+v", body, r)
			}
		}
	})
}
