package memdynamo

import (
	"sort"
	"strings"
)

// maxItemSize is DynamoDB's item size limit (400 KB).
const maxItemSize = 400 * 1024

// expressions are the expression members a request may carry.
type expressions struct {
	ConditionExpression       string
	UpdateExpression          string
	ProjectionExpression      string
	ExpressionAttributeNames  map[string]string
	ExpressionAttributeValues map[string]value
}

// write is one item write — a put, update, delete or condition check, on
// its own or inside a transaction — parsed and validated, not yet applied.
type write struct {
	action string // "Put", "Update", "Delete", "ConditionCheck"
	t      *table
	key    item
	enc    string
	put    item    // Put: the new item
	upd    *update // Update
	cond   condition
	// returnOld is ReturnValuesOnConditionCheckFailure == ALL_OLD.
	returnOld bool
}

// parseWrite validates one write of table t; for a put, it takes the key
// from the item.
func (s *Server) parseWrite(action string, t *table, key, putItem item, ex expressions, returnOnFailure string) (*write, error) {
	w := &write{action: action, t: t, put: putItem, returnOld: returnOnFailure == "ALL_OLD"}
	var err error
	if action == "Put" {
		if w.key, w.enc, err = t.keyFromItem(putItem); err != nil {
			return nil, err
		}
		if err := checkItemSize(putItem); err != nil {
			return nil, err
		}
	} else {
		if w.enc, err = t.keyOf(key); err != nil {
			return nil, err
		}
		w.key = key
	}
	used := newPlaceholders()
	if ex.ConditionExpression != "" {
		if w.cond, err = s.parseConditionExpr("ConditionExpression", ex.ConditionExpression, ex, used); err != nil {
			return nil, err
		}
	} else if action == "ConditionCheck" {
		return nil, validationf("The ConditionExpression parameter is required for a ConditionCheck")
	}
	if action == "Update" {
		if ex.UpdateExpression == "" {
			return nil, validationf("memdynamo needs an UpdateExpression (AttributeUpdates is not supported)")
		}
		p, err := s.newParser("UpdateExpression", ex.UpdateExpression, ex.ExpressionAttributeNames, ex.ExpressionAttributeValues, used)
		if err != nil {
			return nil, err
		}
		u, err := p.parseUpdate()
		if err != nil {
			return nil, err
		}
		w.upd = &u
	}
	if err := checkPlaceholders(ex, used); err != nil {
		return nil, err
	}
	return w, nil
}

func (s *Server) parseConditionExpr(what, expr string, ex expressions, used *placeholders) (condition, error) {
	p, err := s.newParser(what, expr, ex.ExpressionAttributeNames, ex.ExpressionAttributeValues, used)
	if err != nil {
		return nil, err
	}
	c, err := p.parseCondition()
	if err != nil {
		return nil, err
	}
	return c, p.expectEOF()
}

func (s *Server) parseProjectionExpr(ex expressions, used *placeholders) ([]path, error) {
	if ex.ProjectionExpression == "" {
		return nil, nil
	}
	p, err := s.newParser("ProjectionExpression", ex.ProjectionExpression, ex.ExpressionAttributeNames, ex.ExpressionAttributeValues, used)
	if err != nil {
		return nil, err
	}
	return p.parseProjection()
}

// checkPlaceholders refuses a request that supplies #names or :values its
// expressions do not use, as DynamoDB does.
func checkPlaceholders(ex expressions, used *placeholders) error {
	if ex.ExpressionAttributeValues != nil && len(ex.ExpressionAttributeValues) == 0 {
		return validationf("ExpressionAttributeValues must not be empty")
	}
	if ex.ExpressionAttributeNames != nil && len(ex.ExpressionAttributeNames) == 0 {
		return validationf("ExpressionAttributeNames must not be empty")
	}
	if unused := missing(ex.ExpressionAttributeValues, used.values); len(unused) > 0 {
		return validationf("Value provided in ExpressionAttributeValues unused in expressions: keys: {%s}", strings.Join(unused, ", "))
	}
	if unused := missing(ex.ExpressionAttributeNames, used.names); len(unused) > 0 {
		return validationf("Value provided in ExpressionAttributeNames unused in expressions: keys: {%s}", strings.Join(unused, ", "))
	}
	return nil
}

func missing[V any](given map[string]V, used map[string]bool) []string {
	var out []string
	for k := range given {
		if !used[k] {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

func checkItemSize(it item) error {
	if it.size() > maxItemSize {
		return validationf("Item size has exceeded the maximum allowed size")
	}
	return nil
}

// evaluate computes what w would do to the table as it is now: the item
// before, the item after (nil: deleted or untouched by a check), and
// whether the condition held. It changes nothing.
func (w *write) evaluate() (old, next item, ok bool, err error) {
	old = w.t.items[w.enc]
	if w.cond != nil {
		held, err := holds(old, w.cond)
		if err != nil {
			return nil, nil, false, err
		}
		if !held {
			return old, nil, false, nil
		}
	}
	switch w.action {
	case "Put":
		next = w.put.clone()
	case "Update":
		if next, err = apply(old, w.key, *w.upd); err != nil {
			return nil, nil, false, err
		}
		if err := checkItemSize(next); err != nil {
			return nil, nil, false, err
		}
	}
	return old, next, true, nil
}

// commit stores the result of evaluate.
func (w *write) commit(next item) {
	switch w.action {
	case "Put", "Update":
		w.t.items[w.enc] = next
	case "Delete":
		delete(w.t.items, w.enc)
	}
}

func conditionFailed(old item, returnOld bool) error {
	e := &apiError{status: 400, typ: "ConditionalCheckFailedException", message: "The conditional request failed"}
	if returnOld && old != nil {
		e.extra = map[string]any{"Item": old}
	}
	return e
}
