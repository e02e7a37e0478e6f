/* libpmcclient for C++: RAII over the regions of <pmc/pmc.h> (which it includes, with
 * PMC_SCOPE and PMC_REGION, also usable from C++).
 *
 *	#include <pmc/pmc.hpp>
 *	void
 *	handle(request &req)
 *	{
 *		PMC_SCOPE("parse");	// this call site interns "parse" once
 *		parse(req);		// may throw: the region ends exactly once
 *	}
 *
 *	static const pmc::region emit("emit");	// interned once
 *	{
 *		pmc::scope s(emit);		// ends with s: at the '}', a return, an exception
 *		emit_result(out);
 *	}
 *
 * Nothing here allocates, locks or throws. A pmc::scope made from a name looks the name
 * up on each construction (a hash and a comparison, no lock for a name seen before); one
 * made from a pmc::region, or PMC_SCOPE with an unchanging name, does not.
 */
#ifndef PMC_PMC_HPP
#define PMC_PMC_HPP

#include <pmc/pmc.h>

namespace pmc
{

/**
 * region - an interned region name: make it once (a static, a member), use it often
 */
class region
{
      public:
	/** @name: as for pmc_region(); profiling off or a full table give id 0 (ignored) */
	explicit region(const char *name) noexcept : id_(pmc_region(name))
	{
	}
	pmc_region_t
	id() const noexcept
	{
		return id_;
	}
	/** begin() and end(): pmc_begin() and pmc_end() of this region, for spans that are
	 * not one C++ scope. */
	void
	begin() const noexcept
	{
		pmc_begin(id_);
	}
	void
	end() const noexcept
	{
		pmc_end(id_);
	}

      private:
	pmc_region_t id_;
};

/**
 * scope - a region from this object's construction to its destruction
 *
 * The destructor ends it whatever the way out (an exception too), exactly once. Not
 * copyable or movable: a region begins and ends on one thread.
 */
class scope
{
      public:
	explicit scope(const region &r) noexcept : id_(r.id())
	{
		pmc_begin(id_);
	}
	/** @name: looked up on every construction (pmc_region()), so it may change at run
	 * time; no lock or allocation once the name is known. */
	explicit scope(const char *name) noexcept : id_(pmc_region(name))
	{
		pmc_begin(id_);
	}
	~scope()
	{
		pmc_end(id_);
	}
	scope(const scope &) = delete;
	scope &operator=(const scope &) = delete;

      private:
	pmc_region_t id_;
};

} // namespace pmc

#endif
