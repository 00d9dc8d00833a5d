-- 0002_dependency_lookup: find a child's link from the child side (parent release and
-- removal look children up by key).
CREATE INDEX deps_by_child ON deps (child_key);
