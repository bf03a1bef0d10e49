package memdynamo

// Limits of the batch operations, as DynamoDB enforces them.
const (
	maxBatchGetKeys  = 100
	maxBatchWrites   = 25
	maxTransactItems = 100
	maxTransactBytes = 4 << 20
)

func (s *Server) batchGetItem(body []byte) (any, error) {
	var req struct {
		RequestItems map[string]struct {
			Keys           []item
			ConsistentRead bool
			expressions
			legacy
		}
	}
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	total := 0
	for _, r := range req.RequestItems {
		total += len(r.Keys)
	}
	if total == 0 || total > maxBatchGetKeys {
		return nil, validationf("Too many items requested for the BatchGetItem call (%d; 1 to %d)", total, maxBatchGetKeys)
	}
	responses := map[string][]item{}
	for name, r := range req.RequestItems {
		if err := r.legacy.check(); err != nil {
			return nil, err
		}
		t, err := s.table(name)
		if err != nil {
			return nil, err
		}
		used := newPlaceholders()
		proj, err := s.parseProjectionExpr(r.expressions, used)
		if err != nil {
			return nil, err
		}
		if err := checkPlaceholders(r.expressions, used); err != nil {
			return nil, err
		}
		seen := map[string]bool{}
		found := []item{}
		for _, k := range r.Keys {
			enc, err := t.keyOf(k)
			if err != nil {
				return nil, err
			}
			if seen[enc] {
				return nil, validationf("Provided list of item keys contains duplicates")
			}
			seen[enc] = true
			if it, ok := t.items[enc]; ok {
				found = append(found, project(it, proj))
			}
		}
		responses[name] = found
	}
	return map[string]any{"Responses": responses, "UnprocessedKeys": map[string]any{}}, nil
}

func (s *Server) batchWriteItem(body []byte) (any, error) {
	var req struct {
		RequestItems map[string][]struct {
			PutRequest    *struct{ Item item }
			DeleteRequest *struct{ Key item }
		}
	}
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	var writes []*write
	seen := map[string]bool{}
	for name, reqs := range req.RequestItems {
		t, err := s.table(name)
		if err != nil {
			return nil, err
		}
		for _, r := range reqs {
			var w *write
			switch {
			case r.PutRequest != nil && r.DeleteRequest == nil:
				w, err = s.parseWrite("Put", t, nil, r.PutRequest.Item, expressions{}, "")
			case r.DeleteRequest != nil && r.PutRequest == nil:
				w, err = s.parseWrite("Delete", t, r.DeleteRequest.Key, nil, expressions{}, "")
			default:
				return nil, validationf("Supplied AttributeValue has more than one datatypes set, must contain exactly one of the supported datatypes")
			}
			if err != nil {
				return nil, err
			}
			if seen[name+"\x00"+w.enc] {
				return nil, validationf("Provided list of item keys contains duplicates")
			}
			seen[name+"\x00"+w.enc] = true
			writes = append(writes, w)
		}
	}
	if len(writes) == 0 || len(writes) > maxBatchWrites {
		return nil, validationf("Too many items requested for the BatchWriteItem call (%d; 1 to %d)", len(writes), maxBatchWrites)
	}
	for _, w := range writes {
		_, next, _, err := w.evaluate()
		if err != nil {
			return nil, err
		}
		w.commit(next)
	}
	return map[string]any{"UnprocessedItems": map[string]any{}}, nil
}
