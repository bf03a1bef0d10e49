package memdynamo

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// tokenWindow is how long DynamoDB remembers a ClientRequestToken.
const tokenWindow = 10 * time.Minute

// tokenUse is a successful transaction a ClientRequestToken answered: a
// resend of the same request within the window succeeds without applying
// again; another request with the token is a mismatch.
type tokenUse struct {
	request string // the request, re-encoded canonically (object keys sorted)
	at      time.Time
}

type transactOp struct {
	TableName                           string
	Key                                 item
	Item                                item
	ReturnValuesOnConditionCheckFailure string
	expressions
}

type transactWriteItem struct {
	ConditionCheck *transactOp `json:",omitempty"`
	Put            *transactOp `json:",omitempty"`
	Update         *transactOp `json:",omitempty"`
	Delete         *transactOp `json:",omitempty"`
}

func (s *Server) transactWriteItems(body []byte) (any, error) {
	var req struct {
		TransactItems      []transactWriteItem
		ClientRequestToken string
	}
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	if n := len(req.TransactItems); n == 0 || n > maxTransactItems {
		return nil, validationf("1 validation error detected: Value at 'transactItems' failed to satisfy constraint: Member must have length less than or equal to %d and greater than or equal to 1 (got %d)", maxTransactItems, n)
	}
	now := s.opts.Clock()
	canonical, _ := json.Marshal(req.TransactItems) // decoded values re-encode with sorted keys
	if req.ClientRequestToken != "" {
		s.forgetTokens(now)
		if use, ok := s.tokens[req.ClientRequestToken]; ok {
			if use.request != string(canonical) {
				return nil, &apiError{status: 400, typ: "IdempotentParameterMismatchException",
					message: "The request uses the same client token as a previous, but non-identical request."}
			}
			return map[string]any{}, nil
		}
	}
	writes, err := s.parseTransaction(req.TransactItems)
	if err != nil {
		return nil, err
	}
	if len(canonical) > maxTransactBytes {
		return nil, validationf("Transaction request size exceeded the maximum of 4 MB")
	}
	reasons := make([]map[string]any, len(writes))
	nexts := make([]item, len(writes))
	cancelled := false
	for i, w := range writes {
		old, next, ok, err := w.evaluate()
		switch {
		case err != nil:
			var api *apiError
			if !errors.As(err, &api) || api.typ != "ValidationException" {
				return nil, err
			}
			reasons[i] = map[string]any{"Code": "ValidationError", "Message": api.message}
			cancelled = true
		case !ok:
			r := map[string]any{"Code": "ConditionalCheckFailed", "Message": "The conditional request failed"}
			if w.returnOld && old != nil {
				r["Item"] = old
			}
			reasons[i] = r
			cancelled = true
		default:
			reasons[i] = map[string]any{"Code": "None"}
			nexts[i] = next
		}
	}
	if cancelled {
		codes := make([]string, len(reasons))
		for i, r := range reasons {
			codes[i] = r["Code"].(string)
		}
		return nil, &apiError{status: 400, typ: "TransactionCanceledException",
			message: fmt.Sprintf("Transaction cancelled, please refer cancellation reasons for specific reasons [%s]", strings.Join(codes, ", ")),
			extra:   map[string]any{"CancellationReasons": reasons}}
	}
	for i, w := range writes {
		w.commit(nexts[i])
	}
	if req.ClientRequestToken != "" {
		s.tokens[req.ClientRequestToken] = tokenUse{request: string(canonical), at: now}
	}
	return map[string]any{}, nil
}

// parseTransaction validates every action of a transaction; one item may
// be named by one action only.
func (s *Server) parseTransaction(items []transactWriteItem) ([]*write, error) {
	writes := make([]*write, 0, len(items))
	seen := map[string]bool{}
	for _, ti := range items {
		var action string
		var op *transactOp
		n := 0
		for _, c := range []struct {
			name string
			op   *transactOp
		}{{"ConditionCheck", ti.ConditionCheck}, {"Put", ti.Put}, {"Update", ti.Update}, {"Delete", ti.Delete}} {
			if c.op != nil {
				action, op = c.name, c.op
				n++
			}
		}
		if n != 1 {
			return nil, validationf("TransactItems can only contain one of Check, Put, Update or Delete")
		}
		t, err := s.table(op.TableName)
		if err != nil {
			return nil, err
		}
		w, err := s.parseWrite(action, t, op.Key, op.Item, op.expressions, op.ReturnValuesOnConditionCheckFailure)
		if err != nil {
			return nil, err
		}
		id := t.name + "\x00" + w.enc
		if seen[id] {
			return nil, validationf("Transaction request cannot include multiple operations on one item")
		}
		seen[id] = true
		writes = append(writes, w)
	}
	return writes, nil
}

func (s *Server) forgetTokens(now time.Time) {
	for tok, use := range s.tokens {
		if now.Sub(use.at) > tokenWindow {
			delete(s.tokens, tok)
		}
	}
}

func (s *Server) transactGetItems(body []byte) (any, error) {
	var req struct {
		TransactItems []struct {
			Get *transactOp
		}
	}
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	if n := len(req.TransactItems); n == 0 || n > maxTransactItems {
		return nil, validationf("TransactItems must have between 1 and %d items", maxTransactItems)
	}
	responses := make([]map[string]any, 0, len(req.TransactItems))
	for _, ti := range req.TransactItems {
		if ti.Get == nil {
			return nil, validationf("TransactGetItems needs a Get in every item")
		}
		t, err := s.table(ti.Get.TableName)
		if err != nil {
			return nil, err
		}
		enc, err := t.keyOf(ti.Get.Key)
		if err != nil {
			return nil, err
		}
		used := newPlaceholders()
		proj, err := s.parseProjectionExpr(ti.Get.expressions, used)
		if err != nil {
			return nil, err
		}
		if err := checkPlaceholders(ti.Get.expressions, used); err != nil {
			return nil, err
		}
		r := map[string]any{}
		if it, ok := t.items[enc]; ok {
			r["Item"] = project(it, proj)
		}
		responses = append(responses, r)
	}
	return map[string]any{"Responses": responses}, nil
}
