package memdynamo

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// table is one table: its key schema and its items by encoded key.
type table struct {
	name      string
	hashKey   string
	rangeKey  string // "" when the table has only a partition key
	keyKinds  map[string]kind
	attrDefs  []attributeDefinition
	keySchema []keySchemaElement
	billing   string
	created   time.Time
	arn       string
	ttlAttr   string
	items     map[string]item
}

type attributeDefinition struct {
	AttributeName string
	AttributeType string
}

type keySchemaElement struct {
	AttributeName string
	KeyType       string
}

// keyOf validates key against the schema (exactly the key attributes, of
// the declared types, strings and binaries non-empty) and encodes it.
func (t *table) keyOf(key item) (string, error) {
	want := 1
	if t.rangeKey != "" {
		want = 2
	}
	if len(key) != want {
		return "", validationf("The provided key element does not match the schema")
	}
	return t.encodeKey(key)
}

// keyFromItem is the key of an item that must hold the key attributes.
func (t *table) keyFromItem(it item) (item, string, error) {
	key := item{}
	for _, name := range []string{t.hashKey, t.rangeKey} {
		if name == "" {
			continue
		}
		v, ok := it[name]
		if !ok {
			return nil, "", validationf("One or more parameter values were invalid: Missing the key %s in the item", name)
		}
		key[name] = v
	}
	enc, err := t.encodeKey(key)
	return key, enc, err
}

func (t *table) encodeKey(key item) (string, error) {
	var b strings.Builder
	for _, name := range []string{t.hashKey, t.rangeKey} {
		if name == "" {
			continue
		}
		v, ok := key[name]
		if !ok || v.kind != t.keyKinds[name] {
			return "", validationf("One or more parameter values were invalid: Type mismatch for key %s expected: %s actual: %s", name, t.keyKinds[name], v.kind)
		}
		if (v.kind == kindS || v.kind == kindB) && v.s == "" {
			return "", validationf("One or more parameter values are not valid. The AttributeValue for a key attribute cannot contain an empty string value. Key: %s", name)
		}
		fmt.Fprintf(&b, "%d:%s|", len(v.s), v.s)
	}
	return b.String(), nil
}

// keyItem is the key part of a stored item.
func (t *table) keyItem(it item) item {
	k := item{t.hashKey: it[t.hashKey]}
	if t.rangeKey != "" {
		k[t.rangeKey] = it[t.rangeKey]
	}
	return k
}

// sortedKeys orders every item by partition key, then sort key: the order
// Scan returns and Digest writes.
func (t *table) sortedKeys() []string {
	keys := make([]string, 0, len(t.items))
	for k := range t.items {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return t.less(t.items[keys[i]], t.items[keys[j]]) })
	return keys
}

func (t *table) less(a, b item) bool {
	if c, _ := compare(a[t.hashKey], b[t.hashKey]); c != 0 {
		return c < 0
	}
	if t.rangeKey == "" {
		return false
	}
	c, _ := compare(a[t.rangeKey], b[t.rangeKey])
	return c < 0
}

func (t *table) description(status string) map[string]any {
	return map[string]any{
		"TableName":            t.name,
		"TableArn":             t.arn,
		"TableStatus":          status,
		"KeySchema":            t.keySchema,
		"AttributeDefinitions": t.attrDefs,
		"CreationDateTime":     float64(t.created.UnixMilli()) / 1000,
		"ItemCount":            len(t.items),
		"BillingModeSummary":   map[string]any{"BillingMode": t.billing},
		"ProvisionedThroughput": map[string]any{
			"ReadCapacityUnits": 0, "WriteCapacityUnits": 0, "NumberOfDecreasesToday": 0,
		},
	}
}

func (s *Server) table(name string) (*table, error) {
	if name == "" {
		return nil, validationf("1 validation error detected: Value null at 'tableName' failed to satisfy constraint: Member must not be null")
	}
	t, ok := s.tables[name]
	if !ok {
		return nil, notFound()
	}
	return t, nil
}

func (s *Server) createTable(body []byte) (any, error) {
	var req struct {
		TableName            string
		KeySchema            []keySchemaElement
		AttributeDefinitions []attributeDefinition
		BillingMode          string
	}
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	if len(req.TableName) < 3 || len(req.TableName) > 255 {
		return nil, validationf("TableName must be at least 3 characters long and at most 255 characters long")
	}
	if _, exists := s.tables[req.TableName]; exists {
		return nil, &apiError{status: 400, typ: "ResourceInUseException", message: "Table already exists: " + req.TableName}
	}
	t := &table{
		name: req.TableName, keyKinds: map[string]kind{}, attrDefs: req.AttributeDefinitions, keySchema: req.KeySchema,
		billing: req.BillingMode, created: s.opts.Clock(), items: map[string]item{},
		arn: fmt.Sprintf("arn:aws:dynamodb:%s:%s:table/%s", s.opts.Region, s.opts.Account, req.TableName),
	}
	if t.billing == "" {
		t.billing = "PROVISIONED"
	}
	defs := map[string]string{}
	for _, d := range req.AttributeDefinitions {
		defs[d.AttributeName] = d.AttributeType
	}
	for _, k := range req.KeySchema {
		typ, ok := defs[k.AttributeName]
		if !ok {
			return nil, validationf("One or more parameter values were invalid: Some index key attributes are not defined in AttributeDefinitions")
		}
		kd, ok := map[string]kind{"S": kindS, "N": kindN, "B": kindB}[typ]
		if !ok {
			return nil, validationf("Member must satisfy enum value set: [B, N, S]")
		}
		t.keyKinds[k.AttributeName] = kd
		switch k.KeyType {
		case "HASH":
			t.hashKey = k.AttributeName
		case "RANGE":
			t.rangeKey = k.AttributeName
		default:
			return nil, validationf("Invalid KeyType %q", k.KeyType)
		}
	}
	if t.hashKey == "" || len(req.KeySchema) > 2 {
		return nil, validationf("Invalid KeySchema: exactly one HASH key and at most one RANGE key")
	}
	if len(defs) != len(req.KeySchema) {
		return nil, validationf("One or more parameter values were invalid: Number of attributes in KeySchema does not exactly match number of attributes defined in AttributeDefinitions")
	}
	s.tables[t.name] = t
	return map[string]any{"TableDescription": t.description("ACTIVE")}, nil
}

func (s *Server) deleteTable(body []byte) (any, error) {
	var req struct{ TableName string }
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	t, err := s.table(req.TableName)
	if err != nil {
		return nil, err
	}
	delete(s.tables, t.name)
	return map[string]any{"TableDescription": t.description("DELETING")}, nil
}

func (s *Server) describeTable(body []byte) (any, error) {
	var req struct{ TableName string }
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	t, err := s.table(req.TableName)
	if err != nil {
		return nil, err
	}
	return map[string]any{"Table": t.description("ACTIVE")}, nil
}

func (s *Server) listTables(body []byte) (any, error) {
	var req struct {
		ExclusiveStartTableName string
		Limit                   int
	}
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	names := make([]string, 0, len(s.tables))
	for n := range s.tables {
		if n > req.ExclusiveStartTableName {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	out := map[string]any{}
	if req.Limit > 0 && len(names) > req.Limit {
		names = names[:req.Limit]
		out["LastEvaluatedTableName"] = names[len(names)-1]
	}
	out["TableNames"] = names
	return out, nil
}

func (s *Server) updateTimeToLive(body []byte) (any, error) {
	var req struct {
		TableName               string
		TimeToLiveSpecification struct {
			AttributeName string
			Enabled       bool
		}
	}
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	t, err := s.table(req.TableName)
	if err != nil {
		return nil, err
	}
	spec := req.TimeToLiveSpecification
	if spec.Enabled {
		t.ttlAttr = spec.AttributeName
	} else {
		t.ttlAttr = ""
	}
	return map[string]any{"TimeToLiveSpecification": spec}, nil
}

// describeTimeToLive reports TTL as configured. Items are never expired
// here: DynamoDB deletes expired items only eventually (typically within
// days), so no code may rely on when it does.
func (s *Server) describeTimeToLive(body []byte) (any, error) {
	var req struct{ TableName string }
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	t, err := s.table(req.TableName)
	if err != nil {
		return nil, err
	}
	desc := map[string]any{"TimeToLiveStatus": "DISABLED"}
	if t.ttlAttr != "" {
		desc = map[string]any{"TimeToLiveStatus": "ENABLED", "AttributeName": t.ttlAttr}
	}
	return map[string]any{"TimeToLiveDescription": desc}, nil
}
