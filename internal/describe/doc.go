// Package describe is the one descriptor walk of the transports' Policies
// (httplimit and grpclimit): the descriptors a request yields, built from
// the entries the caller configured, matched by a policy.Live to checks,
// and decided, all or nothing, by an admission core. Each transport keeps
// its own Source type and reads its own request (R); the walk, the
// credential check at construction, the recovery from a panicking entry,
// cost or resolver, and the split of enforcing and dry-run checks live
// here once.
package describe
