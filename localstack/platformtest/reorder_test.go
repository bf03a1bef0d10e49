package platformtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
)

// keyOrder is the order reorderingClient writes a JSON object's keys in.
type keyOrder int

const (
	keysSorted keyOrder = iota
	keysReversed
)

// reorderingClient rewrites each JSON request body with every object's keys
// in one order before sending it, and keeps the bodies it sent. It stands
// in for the SDK's map-order serialisation, which varies from one request
// to the next; the emulator does not check signatures.
type reorderingClient struct {
	next  aws.HTTPClient
	order keyOrder

	mu     sync.Mutex
	bodies []string
}

func (c *reorderingClient) Do(req *http.Request) (*http.Response, error) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return nil, err
	}
	_ = req.Body.Close()
	var v any
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("reorder: request body is not JSON: %w", err)
	}
	var out bytes.Buffer
	if err := writeOrdered(&out, v, c.order); err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.bodies = append(c.bodies, out.String())
	c.mu.Unlock()
	req.Body = io.NopCloser(bytes.NewReader(out.Bytes()))
	req.ContentLength = int64(out.Len())
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(out.Bytes())), nil }
	return c.next.Do(req)
}

// writeOrdered writes v as JSON with every object's keys in order.
func writeOrdered(w *bytes.Buffer, v any, order keyOrder) error {
	switch x := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		if order == keysReversed {
			for i, j := 0, len(keys)-1; i < j; i, j = i+1, j-1 {
				keys[i], keys[j] = keys[j], keys[i]
			}
		}
		w.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				w.WriteByte(',')
			}
			kb, _ := json.Marshal(k)
			w.Write(kb)
			w.WriteByte(':')
			if err := writeOrdered(w, x[k], order); err != nil {
				return err
			}
		}
		w.WriteByte('}')
	case []any:
		w.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				w.WriteByte(',')
			}
			if err := writeOrdered(w, e, order); err != nil {
				return err
			}
		}
		w.WriteByte(']')
	default:
		b, err := json.Marshal(x)
		if err != nil {
			return err
		}
		w.Write(b)
	}
	return nil
}
