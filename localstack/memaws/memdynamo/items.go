package memdynamo

// legacy are the pre-expression parameters, refused so a caller cannot
// believe they were honoured.
type legacy struct {
	Expected            map[string]any
	AttributeUpdates    map[string]any
	ConditionalOperator string
	AttributesToGet     []string
	KeyConditions       map[string]any
	QueryFilter         map[string]any
	ScanFilter          map[string]any
}

func (l legacy) check() error {
	if l.Expected != nil || l.AttributeUpdates != nil || l.ConditionalOperator != "" || l.AttributesToGet != nil ||
		l.KeyConditions != nil || l.QueryFilter != nil || l.ScanFilter != nil {
		return validationf("memdynamo supports expressions only, not the legacy conditional parameters")
	}
	return nil
}

func (s *Server) getItem(body []byte) (any, error) {
	var req struct {
		TableName      string
		Key            item
		ConsistentRead bool
		expressions
		legacy
	}
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	if err := req.legacy.check(); err != nil {
		return nil, err
	}
	t, err := s.table(req.TableName)
	if err != nil {
		return nil, err
	}
	enc, err := t.keyOf(req.Key)
	if err != nil {
		return nil, err
	}
	used := newPlaceholders()
	proj, err := s.parseProjectionExpr(req.expressions, used)
	if err != nil {
		return nil, err
	}
	if err := checkPlaceholders(req.expressions, used); err != nil {
		return nil, err
	}
	out := map[string]any{}
	if it, ok := t.items[enc]; ok {
		out["Item"] = project(it, proj)
	}
	return out, nil
}

func (s *Server) putItem(body []byte) (any, error) {
	var req struct {
		TableName                           string
		Item                                item
		ReturnValues                        string
		ReturnValuesOnConditionCheckFailure string
		expressions
		legacy
	}
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	if err := req.legacy.check(); err != nil {
		return nil, err
	}
	if req.ReturnValues != "" && req.ReturnValues != "NONE" && req.ReturnValues != "ALL_OLD" {
		return nil, validationf("ReturnValues can only be ALL_OLD or NONE")
	}
	t, err := s.table(req.TableName)
	if err != nil {
		return nil, err
	}
	w, err := s.parseWrite("Put", t, nil, req.Item, req.expressions, req.ReturnValuesOnConditionCheckFailure)
	if err != nil {
		return nil, err
	}
	return s.single(w, req.ReturnValues)
}

func (s *Server) updateItem(body []byte) (any, error) {
	var req struct {
		TableName                           string
		Key                                 item
		ReturnValues                        string
		ReturnValuesOnConditionCheckFailure string
		expressions
		legacy
	}
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	if err := req.legacy.check(); err != nil {
		return nil, err
	}
	t, err := s.table(req.TableName)
	if err != nil {
		return nil, err
	}
	w, err := s.parseWrite("Update", t, req.Key, nil, req.expressions, req.ReturnValuesOnConditionCheckFailure)
	if err != nil {
		return nil, err
	}
	return s.single(w, req.ReturnValues)
}

func (s *Server) deleteItem(body []byte) (any, error) {
	var req struct {
		TableName                           string
		Key                                 item
		ReturnValues                        string
		ReturnValuesOnConditionCheckFailure string
		expressions
		legacy
	}
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	if err := req.legacy.check(); err != nil {
		return nil, err
	}
	if req.ReturnValues != "" && req.ReturnValues != "NONE" && req.ReturnValues != "ALL_OLD" {
		return nil, validationf("ReturnValues can only be ALL_OLD or NONE")
	}
	t, err := s.table(req.TableName)
	if err != nil {
		return nil, err
	}
	w, err := s.parseWrite("Delete", t, req.Key, nil, req.expressions, req.ReturnValuesOnConditionCheckFailure)
	if err != nil {
		return nil, err
	}
	return s.single(w, req.ReturnValues)
}

// single applies one write outside a transaction and answers with the
// attributes ReturnValues asks for.
func (s *Server) single(w *write, returnValues string) (any, error) {
	old, next, ok, err := w.evaluate()
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, conditionFailed(old, w.returnOld)
	}
	w.commit(next)
	out := map[string]any{}
	switch returnValues {
	case "", "NONE":
	case "ALL_OLD":
		if old != nil {
			out["Attributes"] = old
		}
	case "ALL_NEW":
		out["Attributes"] = next
	case "UPDATED_OLD", "UPDATED_NEW":
		src := next
		if returnValues == "UPDATED_OLD" {
			src = old
		}
		if attrs := updatedAttributes(w.upd, src); len(attrs) > 0 {
			out["Attributes"] = attrs
		}
	default:
		return nil, validationf("Invalid ReturnValues %q", returnValues)
	}
	return out, nil
}

// updatedAttributes are the top-level attributes of src that an update's
// actions name.
func updatedAttributes(u *update, src item) item {
	if u == nil || src == nil {
		return nil
	}
	out := item{}
	touch := func(p path) {
		if v, ok := src[p[0].name]; ok {
			out[p[0].name] = v
		}
	}
	for _, a := range u.set {
		touch(a.p)
	}
	for _, p := range u.remove {
		touch(p)
	}
	for _, a := range u.add {
		touch(a.p)
	}
	for _, d := range u.delete {
		touch(d.p)
	}
	return out
}
