// Package memdynamo is an in-memory Amazon DynamoDB that speaks DynamoDB's
// JSON protocol, for the fast test tier.
//
// The project's code reaches it through the real AWS SDK for Go, over an
// in-process transport (localstack/memaws), so the condition and update
// expressions shared/records writes — the protocol's every state change —
// are parsed and evaluated here exactly as DynamoDB would: conditions,
// transactions that fail as a whole with per-item cancellation reasons,
// client request tokens, reserved words, unused placeholders, the 400 KB
// item and 100-item transaction limits, and Query's 1 MB pages. Every
// request is atomic: one mutex guards the whole state. It is held to the
// same contract tests as the emulator (localstack/platformtest).
package memdynamo

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Options configure a Server. The zero value is ready to use.
type Options struct {
	// Region names the tables' ARNs; default "us-east-1".
	Region string
	// Account names the tables' ARNs; default "000000000000".
	Account string
	// Clock is what the server takes as now (table creation times, how
	// long a client request token is remembered); default time.Now.
	Clock func() time.Time
}

// Failure is an error a test makes the server answer instead of applying
// a request (SetFault): Type is DynamoDB's error name, e.g.
// "ProvisionedThroughputExceededException" (400) or
// "InternalServerError" (500).
type Failure struct {
	Status  int
	Type    string
	Message string
}

// Server is an in-memory DynamoDB. Its zero value is not usable: call New.
type Server struct {
	opts     Options
	reserved map[string]bool

	mu     sync.Mutex
	tables map[string]*table
	tokens map[string]tokenUse // ClientRequestToken → the request it answered
	fault  func(op, table string) *Failure
}

// New returns an empty server.
func New(opts Options) *Server {
	if opts.Region == "" {
		opts.Region = "us-east-1"
	}
	if opts.Account == "" {
		opts.Account = "000000000000"
	}
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	return &Server{opts: opts, reserved: reservedWords(), tables: map[string]*table{}, tokens: map[string]tokenUse{}}
}

// SetFault makes the server consult f before applying each request; a
// non-nil Failure is answered instead. nil removes the fault.
func (s *Server) SetFault(f func(op, table string) *Failure) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fault = f
}

// apiError is an error DynamoDB answers with: its type, message and any
// members the SDK decodes (CancellationReasons, Item).
type apiError struct {
	status  int
	typ     string
	message string
	extra   map[string]any
}

func (e *apiError) Error() string { return e.typ + ": " + e.message }

func validationf(format string, args ...any) error {
	return &apiError{status: 400, typ: "ValidationException", message: fmt.Sprintf(format, args...)}
}

func notFound() error {
	return &apiError{status: 400, typ: "ResourceNotFoundException", message: "Requested resource not found"}
}

// ServeHTTP answers one DynamoDB request (POST /, X-Amz-Target
// DynamoDB_20120810.<Operation>).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	target := r.Header.Get("X-Amz-Target")
	op, ok := strings.CutPrefix(target, "DynamoDB_20120810.")
	if r.Method != http.MethodPost || !ok {
		writeError(w, &apiError{status: 400, typ: "UnknownOperationException", message: "unknown target " + target})
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		writeError(w, &apiError{status: 400, typ: "SerializationException", message: err.Error()})
		return
	}
	out, err := s.call(op, body)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// call decodes and applies one operation under the lock.
func (s *Server) call(op string, body []byte) (any, error) {
	h, ok := operations[op]
	if !ok {
		return nil, &apiError{status: 400, typ: "UnknownOperationException", message: "operation " + op + " is not supported by memdynamo"}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fault != nil {
		if f := s.fault(op, tableNameOf(body)); f != nil {
			return nil, &apiError{status: f.Status, typ: f.Type, message: f.Message}
		}
	}
	return h(s, body)
}

// tableNameOf is the TableName of a request, for fault matching.
func tableNameOf(body []byte) string {
	var req struct{ TableName string }
	_ = json.Unmarshal(body, &req) // a request without one has none
	return req.TableName
}

type handler func(s *Server, body []byte) (any, error)

var operations = map[string]handler{
	"CreateTable":        (*Server).createTable,
	"DeleteTable":        (*Server).deleteTable,
	"DescribeTable":      (*Server).describeTable,
	"ListTables":         (*Server).listTables,
	"UpdateTimeToLive":   (*Server).updateTimeToLive,
	"DescribeTimeToLive": (*Server).describeTimeToLive,
	"GetItem":            (*Server).getItem,
	"PutItem":            (*Server).putItem,
	"UpdateItem":         (*Server).updateItem,
	"DeleteItem":         (*Server).deleteItem,
	"Query":              (*Server).query,
	"Scan":               (*Server).scan,
	"BatchGetItem":       (*Server).batchGetItem,
	"BatchWriteItem":     (*Server).batchWriteItem,
	"TransactWriteItems": (*Server).transactWriteItems,
	"TransactGetItems":   (*Server).transactGetItems,
}

// decode reads a request body into req, as a validation error when it
// does not parse.
func decode(body []byte, req any) error {
	if err := json.Unmarshal(body, req); err != nil {
		var api *apiError
		if errors.As(err, &api) {
			return api
		}
		return &apiError{status: 400, typ: "SerializationException", message: err.Error()}
	}
	return nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = 500, []byte(`{"__type":"com.amazonaws.dynamodb.v20120810#InternalServerError","message":"encode response"}`)
	}
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	// The SDK checks this header when present, as it does with DynamoDB's.
	w.Header().Set("X-Amz-Crc32", strconv.FormatUint(uint64(crc32.ChecksumIEEE(b)), 10))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

func writeError(w http.ResponseWriter, err error) {
	var api *apiError
	if !errors.As(err, &api) {
		api = &apiError{status: 500, typ: "InternalServerError", message: err.Error()}
	}
	body := map[string]any{"__type": "com.amazonaws.dynamodb.v20120810#" + api.typ, "message": api.message}
	for k, v := range api.extra {
		body[k] = v
	}
	writeJSON(w, api.status, body)
}

// Digest writes the durable state — every table's definition and every
// item — in a canonical order to h, so two servers that applied the same
// writes have equal digests.
func (s *Server) Digest(h hash.Hash) {
	s.mu.Lock()
	defer s.mu.Unlock()
	names := make([]string, 0, len(s.tables))
	for n := range s.tables {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		t := s.tables[n]
		fmt.Fprintf(h, "table %s %s %s ttl=%s\n", t.name, t.hashKey, t.rangeKey, t.ttlAttr)
		for _, k := range t.sortedKeys() {
			b, _ := json.Marshal(t.items[k]) // maps marshal with sorted keys
			h.Write(b)
			h.Write([]byte{'\n'})
		}
	}
}

// ItemCount is how many items the table holds (0 for an unknown table).
func (s *Server) ItemCount(tableName string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t, ok := s.tables[tableName]; ok {
		return len(t.items)
	}
	return 0
}

// Snapshot is the server's durable state at one moment: its tables and
// their items. Restore puts a server back to it; a snapshot can be
// restored any number of times. The explorer (tests/explore) backtracks
// this way instead of replaying every schedule from the start.
type Snapshot struct {
	tables map[string]*table
}

// Snapshot copies the durable state. Client request tokens are not part of
// it: a restored server has forgotten them, as one restarted after their
// window would have.
func (s *Server) Snapshot() *Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	return &Snapshot{tables: copyTables(s.tables)}
}

// Restore makes snap the server's state.
func (s *Server) Restore(snap *Snapshot) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tables = copyTables(snap.tables)
	s.tokens = map[string]tokenUse{}
}

func copyTables(in map[string]*table) map[string]*table {
	out := make(map[string]*table, len(in))
	for name, t := range in {
		c := *t
		// A stored item is never changed in place (a write stores a new
		// one), so copies may share them.
		c.items = make(map[string]item, len(t.items))
		for k, it := range t.items {
			c.items[k] = it
		}
		out[name] = &c
	}
	return out
}
