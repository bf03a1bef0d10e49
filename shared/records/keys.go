package records

import (
	"fmt"

	"github.com/sluice-dev/sluice/shared/planning"
)

// Item keys (DESIGN.md §3). One table, PK/SK; every item of a tenant shares
// its partition key, so a tenant's whole state is one Query away for
// `sluice status`, while the hot path reads single items.
func tenantPK(tenant string) string { return "T#" + tenant }

func blockSK(id string) string { return "B#" + id }

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

// agendaPK is the partition of the agenda: what the cleaner's sweep must
// look at, keyed so that a sweep queries only what is due.
const agendaPK = "AGENDA"

// tenantsPK lists tenants, one item each, for status and sweeps.
const tenantsPK = "TENANTS"
