/* model: the data model's root object, set up from the policy (see model.h). */
#include "model/model.h"

#include <stdlib.h>

#include "kernel/policy.h"

void
model_init(struct model *m, const struct policy *pol)
{
	*m = (struct model){0};
	m->reg.max_ended = pol->keep_exited;
	m->reg.max_ended_per_uid = pol->keep_exited_per_user;
	m->reg.max_regions = pol->max_total_regions;
	m->reg.users = &m->users;
	m->hist_budget.limit = (size_t)pol->max_memory_mib << 20;
	m->users.parent = &m->hist_budget;
	m->users.hist_limit = (size_t)pol->max_memory_per_user_mib << 20;
	m->define_budget.limit = (size_t)pol->max_define_memory_mib << 20;
	m->users.define_parent = &m->define_budget;
	m->users.define_limit = (size_t)pol->max_define_memory_per_user_mib << 20;
}

void
model_free(struct model *m)
{
	registry_free(&m->reg);
	users_free(&m->users);
	free(m->state_moved_aside);
	*m = (struct model){0};
}
