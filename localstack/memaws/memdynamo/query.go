package memdynamo

import (
	"sort"
)

// pageBytes is how much item data one Query or Scan page reads at most
// (1 MB), as in DynamoDB: a caller that does not follow LastEvaluatedKey
// sees only part of a large result here too.
const pageBytes = 1 << 20

type readRequest struct {
	TableName              string
	IndexName              string
	KeyConditionExpression string
	FilterExpression       string
	ExclusiveStartKey      item
	Limit                  int
	ScanIndexForward       *bool
	Select                 string
	ConsistentRead         bool
	Segment                *int
	TotalSegments          *int
	expressions
	legacy
}

func (s *Server) query(body []byte) (any, error) {
	var req readRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	t, plan, err := s.planRead(req, true)
	if err != nil {
		return nil, err
	}
	candidates := make([]item, 0)
	for _, it := range t.items {
		ok, err := holds(it, plan.key)
		if err != nil {
			return nil, err
		}
		if ok {
			candidates = append(candidates, it)
		}
	}
	sort.Slice(candidates, func(i, j int) bool { return t.less(candidates[i], candidates[j]) })
	if req.ScanIndexForward != nil && !*req.ScanIndexForward {
		for i, j := 0, len(candidates)-1; i < j; i, j = i+1, j-1 {
			candidates[i], candidates[j] = candidates[j], candidates[i]
		}
	}
	return page(t, candidates, req, plan)
}

func (s *Server) scan(body []byte) (any, error) {
	var req readRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	if req.Segment != nil || req.TotalSegments != nil {
		return nil, validationf("memdynamo does not support parallel scans")
	}
	t, plan, err := s.planRead(req, false)
	if err != nil {
		return nil, err
	}
	keys := t.sortedKeys()
	candidates := make([]item, len(keys))
	for i, k := range keys {
		candidates[i] = t.items[k]
	}
	return page(t, candidates, req, plan)
}

// readPlan is a Query's or Scan's parsed expressions.
type readPlan struct {
	key    condition // Query only
	filter condition
	proj   []path
}

func (s *Server) planRead(req readRequest, isQuery bool) (*table, readPlan, error) {
	var plan readPlan
	if err := req.legacy.check(); err != nil {
		return nil, plan, err
	}
	if req.IndexName != "" {
		return nil, plan, validationf("memdynamo does not support secondary indexes")
	}
	t, err := s.table(req.TableName)
	if err != nil {
		return nil, plan, err
	}
	used := newPlaceholders()
	if isQuery {
		if req.KeyConditionExpression == "" {
			return nil, plan, validationf("Either the KeyConditions or KeyConditionExpression parameter must be specified in the request.")
		}
		if plan.key, err = s.parseConditionExpr("KeyConditionExpression", req.KeyConditionExpression, req.expressions, used); err != nil {
			return nil, plan, err
		}
		if err := t.checkKeyCondition(plan.key); err != nil {
			return nil, plan, err
		}
	}
	if req.FilterExpression != "" {
		if plan.filter, err = s.parseConditionExpr("FilterExpression", req.FilterExpression, req.expressions, used); err != nil {
			return nil, plan, err
		}
	}
	if plan.proj, err = s.parseProjectionExpr(req.expressions, used); err != nil {
		return nil, plan, err
	}
	if err := checkPlaceholders(req.expressions, used); err != nil {
		return nil, plan, err
	}
	if req.Limit < 0 {
		return nil, plan, validationf("Limit must be at least 1")
	}
	if req.ExclusiveStartKey != nil {
		if _, err := t.keyOf(req.ExclusiveStartKey); err != nil {
			return nil, plan, validationf("The provided starting key is invalid: %v", err)
		}
	}
	return t, plan, nil
}

// checkKeyCondition accepts what DynamoDB accepts as a key condition: an
// equality on the partition key, optionally AND one comparison, BETWEEN
// or begins_with on the sort key.
func (t *table) checkKeyCondition(c condition) error {
	var parts []condition
	if and, ok := c.(andCond); ok {
		parts = []condition{and.a, and.b}
	} else {
		parts = []condition{c}
	}
	var hash, rng int
	for _, p := range parts {
		name, op := keyConditionPart(p)
		switch {
		case name == t.hashKey && op == "=":
			hash++
		case name != "" && name == t.rangeKey:
			rng++
		default:
			return validationf("Query key condition not supported")
		}
	}
	if hash != 1 || rng > 1 {
		return validationf("Query condition missed key schema element: %s", t.hashKey)
	}
	return nil
}

func keyConditionPart(c condition) (attr, op string) {
	top := func(o operand) string {
		if p, ok := o.(pathOperand); ok && len(p.p) == 1 {
			return p.p[0].name
		}
		return ""
	}
	switch c := c.(type) {
	case cmpCond:
		if _, isVal := c.b.(valueOperand); isVal && c.op != "<>" {
			return top(c.a), c.op
		}
	case betweenCond:
		return top(c.v), "BETWEEN"
	case funcCond:
		if c.fn == "begins_with" && len(c.p) == 1 {
			return c.p[0].name, "begins_with"
		}
	}
	return "", ""
}

// page returns the items after ExclusiveStartKey, up to Limit evaluated
// items or 1 MB, filtered and projected.
func page(t *table, candidates []item, req readRequest, plan readPlan) (any, error) {
	start := 0
	if req.ExclusiveStartKey != nil {
		startEnc, _ := t.keyOf(req.ExclusiveStartKey)
		start = len(candidates)
		for i, it := range candidates {
			enc, _ := t.encodeKey(t.keyItem(it))
			if enc == startEnc {
				start = i + 1
				break
			}
		}
		if start == len(candidates) {
			// The start key's item is gone: continue after where it would sort.
			start = positionAfter(t, candidates, req.ExclusiveStartKey, req.ScanIndexForward)
		}
	}
	var items []item
	scanned, bytes := 0, 0
	var last item
	for _, it := range candidates[start:] {
		if (req.Limit > 0 && scanned == req.Limit) || bytes >= pageBytes {
			break
		}
		scanned++
		bytes += it.size()
		last = it
		if plan.filter != nil {
			ok, err := holds(it, plan.filter)
			if err != nil {
				return nil, err
			}
			if !ok {
				continue
			}
		}
		items = append(items, project(it, plan.proj))
	}
	out := map[string]any{"Count": len(items), "ScannedCount": scanned}
	if req.Select != "COUNT" {
		if items == nil {
			items = []item{}
		}
		out["Items"] = items
	}
	if last != nil && start+scanned < len(candidates) || (last != nil && req.Limit > 0 && scanned == req.Limit) {
		out["LastEvaluatedKey"] = t.keyItem(last)
	}
	return out, nil
}

func positionAfter(t *table, candidates []item, startKey item, forward *bool) int {
	backward := forward != nil && !*forward
	for i, it := range candidates {
		before := t.less(startKey, it)
		if backward {
			before = t.less(it, startKey)
		}
		if before {
			return i
		}
	}
	return len(candidates)
}
