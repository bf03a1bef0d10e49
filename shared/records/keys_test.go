package records

import (
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sluice-dev/sluice/shared/planning"
)

// TestParseItemKey: every key the store writes reads back as what it is.
func TestParseItemKey(t *testing.T) {
	g := planning.GroupKey{Stream: "0123456789abcdef", Level: 2, RangeStart: -43200000}
	const id = "01HK1BZM803E0BF5W9NT09TAJH"
	pk := tenantPK("team-a")
	for _, tc := range []struct {
		sk   string
		want ItemKey
	}{
		{blockSK(id), ItemKey{Kind: ItemBlock, Tenant: "team-a", Block: id}},
		{streamSK(g.Stream), ItemKey{Kind: ItemStream, Tenant: "team-a", Stream: g.Stream}},
		{groupSK(g), ItemKey{Kind: ItemGroupHead, Tenant: "team-a", Group: g}},
		{partitionSK(g, 7, 12), ItemKey{Kind: ItemPartition, Tenant: "team-a", Group: g, Version: 7, Partition: 12}},
		{memberSK(g, id), ItemKey{Kind: ItemMember, Tenant: "team-a", Group: g, Block: id}},
		{"G#nonsense", ItemKey{}},
		{groupSK(g) + "#V#x#P#1", ItemKey{}},
	} {
		if got := ParseItemKey(pk, tc.sk); got != tc.want {
			t.Errorf("ParseItemKey(%q) = %+v, want %+v", tc.sk, got, tc.want)
		}
	}
	for _, k := range []map[string]types.AttributeValue{agendaKey(AgendaDelete, time.UnixMilli(0), "t", "b"), legacyAgendaKey(AgendaDelete, time.UnixMilli(0), "t", "b")} {
		pk, sk := k["PK"].(*types.AttributeValueMemberS).Value, k["SK"].(*types.AttributeValueMemberS).Value
		if got := ParseItemKey(pk, sk); got.Kind != ItemOther {
			t.Errorf("an agenda item %s/%s parsed as %+v", pk, sk, got)
		}
	}
	if got := ParseItemKey(pk, partitionSK(g, 7, 12)).HeadSK(); got != groupSK(g) {
		t.Errorf("HeadSK = %q, want %q", got, groupSK(g))
	}
}
