package records

import (
	"fmt"
	"strings"

	"github.com/sluice-dev/sluice/shared/planning"
)

// Item keys (docs/design.md §3). One table, PK/SK; every item of a tenant shares
// its partition key, so a tenant's whole state is one Query away for
// `sluice status`, while the hot path reads single items.
func tenantPK(tenant string) string { return "T#" + tenant }

func blockSK(id string) string { return "B#" + id }

func streamSK(id string) string { return "S#" + id }

func groupSK(g planning.GroupKey) string { return "G#" + g.String() }

func partitionPrefix(g planning.GroupKey, v int64) string {
	return fmt.Sprintf("G#%s#V#%d#P#", g, v)
}

func partitionSK(g planning.GroupKey, v int64, p int) string {
	return fmt.Sprintf("%s%d", partitionPrefix(g, v), p)
}

// memberSK indexes a block under a group range it falls in, so planning
// reads only the blocks of one range, never a whole tenant.
func memberPrefix(g planning.GroupKey) string { return "R#" + g.String() + "#" }

func memberSK(g planning.GroupKey, id string) string { return memberPrefix(g) + id }

// tenantsPK lists tenants, one item each, for status and sweeps.
const tenantsPK = "TENANTS"

// ItemKind says what a table item is.
type ItemKind int

// Item kinds, as ParseItemKey tells them.
const (
	ItemOther ItemKind = iota
	ItemBlock
	ItemGroupHead
	ItemPartition
	ItemMember
	ItemStream
)

// ItemKey is what an item's PK/SK says it is. Tests' oracles read keys
// through it, so a change of the key format changes them too instead of
// silently turning a check off.
type ItemKey struct {
	Kind      ItemKind
	Tenant    string
	Group     planning.GroupKey // heads, partitions, memberships
	Version   int64             // partitions
	Partition int               // partitions
	Block     string            // blocks, memberships
	Stream    string            // streams
}

// HeadSK is the sort key of the group head a partition or membership item
// belongs to.
func (k ItemKey) HeadSK() string { return groupSK(k.Group) }

// ParseItemKey classifies an item by its key; anything that is not a
// tenant's item of a known kind is ItemOther.
func ParseItemKey(pk, sk string) ItemKey {
	tenant, ok := strings.CutPrefix(pk, "T#")
	if !ok {
		return ItemKey{}
	}
	k := ItemKey{Tenant: tenant}
	switch {
	case strings.HasPrefix(sk, "B#"):
		k.Kind, k.Block = ItemBlock, strings.TrimPrefix(sk, "B#")
	case strings.HasPrefix(sk, "S#"):
		k.Kind, k.Stream = ItemStream, strings.TrimPrefix(sk, "S#")
	case strings.HasPrefix(sk, "R#"):
		rest := strings.TrimPrefix(sk, "R#")
		i := strings.LastIndex(rest, "#")
		if i < 0 {
			return ItemKey{}
		}
		g, err := planning.ParseGroupKey(rest[:i])
		if err != nil {
			return ItemKey{}
		}
		k.Kind, k.Group, k.Block = ItemMember, g, rest[i+1:]
	case strings.HasPrefix(sk, "G#"):
		rest := strings.TrimPrefix(sk, "G#")
		gs, vp, isPart := strings.Cut(rest, "#V#")
		g, err := planning.ParseGroupKey(gs)
		if err != nil {
			return ItemKey{}
		}
		k.Group = g
		if !isPart {
			k.Kind = ItemGroupHead
			return k
		}
		var v int64
		var p int
		if _, err := fmt.Sscanf(vp, "%d#P#%d", &v, &p); err != nil || partitionSK(g, v, p) != sk {
			return ItemKey{}
		}
		k.Kind, k.Version, k.Partition = ItemPartition, v, p
	}
	return k
}
