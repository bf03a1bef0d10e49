package testworld

import (
	"fmt"
	"time"
)

// ObjectCreatedBody is an S3 ObjectCreated notification for key, as the
// bucket sends it to SQS, in one of two shapes: AWS's (awsShape: a
// URL-encoded key, a zoned time, a sequencer, and versionID when it is
// known) or the emulator's (the key as it is, a time without zone, no
// sequencer or versionId). The planner must read both.
func ObjectCreatedBody(bucket, key, versionID string, awsShape bool, now time.Time) string {
	now = now.UTC()
	if !awsShape {
		return fmt.Sprintf(`{"Records":[{"eventVersion":"2.1","eventSource":"aws:s3","awsRegion":"us-east-1",`+
			`"eventTime":"%s","eventName":"ObjectCreated:Put","s3":{"s3SchemaVersion":"1.0","bucket":{"name":%q,`+
			`"arn":"arn:aws:s3:::%s"},"object":{"key":%q,"size":1}}}]}`,
			now.Format("2006-01-02T15:04:05.000"), bucket, bucket, key)
	}
	vid := ""
	if versionID != "" {
		vid = fmt.Sprintf(`,"versionId":%q`, versionID)
	}
	return fmt.Sprintf(`{"Records":[{"eventVersion":"2.1","eventSource":"aws:s3","awsRegion":"us-east-1",`+
		`"eventTime":"%s","eventName":"ObjectCreated:Put","s3":{"s3SchemaVersion":"1.0","bucket":{"name":%q,`+
		`"arn":"arn:aws:s3:::%s"},"object":{"key":%q,"size":1,"eTag":"0"%s,"sequencer":"%016X"}}}]}`,
		now.Format(time.RFC3339Nano), bucket, bucket, urlEncode(key), vid, now.UnixNano())
}

// urlEncode encodes a key as S3 does in event records.
func urlEncode(key string) string {
	out := make([]byte, 0, len(key)*3)
	for i := 0; i < len(key); i++ {
		c := key[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '-', c == '_', c == '.', c == '~':
			out = append(out, c)
		default:
			out = append(out, fmt.Sprintf("%%%02X", c)...)
		}
	}
	return string(out)
}
