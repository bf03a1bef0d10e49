package blockmeta

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"sync"
)

// Every JSON object of meta.json is decoded into a typed struct plus an
// Unknown map that keeps, byte for byte, every member the struct does not
// name. Marshalling writes the typed members in struct order followed by
// the unknown members in key order, so the output is deterministic and a
// read-modify-write by Sluice never drops what another writer (a newer
// Prometheus, Thanos, Cortex, Mimir) put there.

var knownKeysCache sync.Map // reflect.Type -> []string

// knownKeys returns the JSON member names of the struct type t.
func knownKeys(t reflect.Type) []string {
	if v, ok := knownKeysCache.Load(t); ok {
		return v.([]string)
	}
	var keys []string
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		keys = append(keys, name)
	}
	knownKeysCache.Store(t, keys)
	return keys
}

// isKnown reports whether key names a typed member. encoding/json matches
// member names case-insensitively, so this does too: a member that filled a
// typed field must not come back a second time as an unknown one.
func isKnown(keys []string, key string) bool {
	for _, k := range keys {
		if strings.EqualFold(k, key) {
			return true
		}
	}
	return false
}

// unmarshalObject decodes data into typed (a pointer to a struct without
// custom methods) and returns the members that typed does not know.
func unmarshalObject(data []byte, typed any) (map[string]json.RawMessage, error) {
	if err := json.Unmarshal(data, typed); err != nil {
		return nil, err
	}
	var all map[string]json.RawMessage
	if err := json.Unmarshal(data, &all); err != nil {
		return nil, err
	}
	keys := knownKeys(reflect.TypeOf(typed).Elem())
	var unknown map[string]json.RawMessage
	for k, v := range all {
		if isKnown(keys, k) {
			continue
		}
		if unknown == nil {
			unknown = map[string]json.RawMessage{}
		}
		unknown[k] = v
	}
	return unknown, nil
}

// marshalObject encodes typed (a struct without custom methods) and appends
// the unknown members, sorted by key.
func marshalObject(typed any, unknown map[string]json.RawMessage) ([]byte, error) {
	b, err := json.Marshal(typed)
	if err != nil {
		return nil, err
	}
	if len(unknown) == 0 {
		return b, nil
	}
	keys := knownKeys(reflect.TypeOf(typed))
	extra := make([]string, 0, len(unknown))
	for k := range unknown {
		if !isKnown(keys, k) {
			extra = append(extra, k)
		}
	}
	if len(extra) == 0 {
		return b, nil
	}
	sort.Strings(extra)
	b = bytes.TrimSpace(b)
	if len(b) < 2 || b[len(b)-1] != '}' {
		return nil, fmt.Errorf("marshal %T: not a JSON object", typed)
	}
	var buf bytes.Buffer
	buf.Write(b[:len(b)-1])
	first := len(b) == 2 // "{}"
	for _, k := range extra {
		if !first {
			buf.WriteByte(',')
		}
		first = false
		kb, err := json.Marshal(k)
		if err != nil {
			return nil, err
		}
		buf.Write(kb)
		buf.WriteByte(':')
		var compact bytes.Buffer
		if err := json.Compact(&compact, unknown[k]); err != nil {
			return nil, fmt.Errorf("marshal unknown member %q: %w", k, err)
		}
		buf.Write(compact.Bytes())
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}
