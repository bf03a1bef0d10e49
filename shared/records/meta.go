package records

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// A block record holds its meta.json body: an upload's, read at
// registration, or an output's, which only the uploader publishes. A
// DynamoDB item holds at most 400 KB, and a meta.json can be larger: an
// output's compaction.sources lists every level-0 block below it (a 14-day
// block of a tenant with a hundred ingesters names some 17,000), and some
// writers put more in it. So a body over InlineMetaBytes is compressed and
// kept in part items (M#<ULID>#<i>) beside the block item, written in the
// same transaction; the store reads them back into Block.Meta, so callers
// never see the difference.
const (
	// InlineMetaBytes is the largest body kept in the block item itself.
	InlineMetaBytes = 64 << 10
	// metaPartBytes is the size of one part item's compressed slice.
	metaPartBytes = 300 << 10
	// MaxMetaParts bounds the parts: with the rest of its transaction they
	// stay under DynamoDB's 4 MB (and 100 items) per transaction.
	MaxMetaParts = 10
)

// ErrMetaTooLarge is returned for a meta.json that, compressed, needs more
// than MaxMetaParts parts (about 3 MB compressed).
var ErrMetaTooLarge = errors.New("meta.json too large to record")

func metaPartPrefix(id string) string { return "M#" + id + "#" }

func metaPartSK(id string, i int) string { return fmt.Sprintf("%s%03d", metaPartPrefix(id), i) }

// compressMeta gzips a body and cuts it into parts.
func compressMeta(body string) ([][]byte, error) {
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if _, err := io.WriteString(zw, body); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	z := buf.Bytes()
	var parts [][]byte
	for len(z) > 0 {
		n := min(len(z), metaPartBytes)
		parts = append(parts, z[:n])
		z = z[n:]
	}
	if len(parts) > MaxMetaParts {
		return nil, fmt.Errorf("%d bytes, %d compressed (at most %d): %w", len(body), buf.Len(), MaxMetaParts*metaPartBytes, ErrMetaTooLarge)
	}
	return parts, nil
}

// CheckMetaSize reports a meta.json body too large to record.
func CheckMetaSize(body []byte) error {
	if len(body) <= InlineMetaBytes {
		return nil
	}
	_, err := compressMeta(string(body))
	return err
}

// splitMeta moves a large meta.json out of b into part items (puts that
// belong in the transaction writing b), and says so in b.MetaParts.
func splitMeta(b Block) (Block, []types.TransactWriteItem, error) {
	b.MetaParts = 0
	if len(b.Meta) <= InlineMetaBytes {
		return b, nil, nil
	}
	parts, err := compressMeta(b.Meta)
	if err != nil {
		return b, nil, fmt.Errorf("block %s: meta.json of %w", b.Key(), err)
	}
	items := make([]types.TransactWriteItem, 0, len(parts))
	for i, p := range parts {
		items = append(items, types.TransactWriteItem{Put: &types.Put{Item: map[string]types.AttributeValue{
			"PK": s(tenantPK(b.Tenant)), "SK": s(metaPartSK(b.ID, i)), "data": &types.AttributeValueMemberB{Value: p},
		}}})
	}
	b.Meta, b.MetaParts = "", len(parts)
	return b, items, nil
}

// loadMeta reads a block's meta.json back from its part items.
func (st *Store) loadMeta(ctx context.Context, b *Block) error {
	if b.MetaParts == 0 {
		return nil
	}
	items, err := st.query(ctx, tenantPK(b.Tenant), metaPartPrefix(b.ID))
	if err != nil {
		return err
	}
	if len(items) != b.MetaParts {
		return fmt.Errorf("block %s: %d of %d meta.json parts found", b.Key(), len(items), b.MetaParts)
	}
	var z []byte
	for _, it := range items { // in SK order: part 000 first
		d, ok := it["data"].(*types.AttributeValueMemberB)
		if !ok {
			return fmt.Errorf("block %s: a meta.json part has no data", b.Key())
		}
		z = append(z, d.Value...)
	}
	zr, err := gzip.NewReader(bytes.NewReader(z))
	if err != nil {
		return fmt.Errorf("block %s: meta.json parts: %w", b.Key(), err)
	}
	body, err := io.ReadAll(zr)
	if err != nil {
		return fmt.Errorf("block %s: meta.json parts: %w", b.Key(), err)
	}
	b.Meta = string(body)
	return nil
}
