-- removeJob: remove a job that is not locked (and its children unless told not to).
-- KEYS: wait paused active prioritized delayed completed failed waiting-children events
-- ARGV: [1] queue key prefix; [2] job id; [3] remove children (1/0)
-- Events: removed (prev = the state it left), parents' waiting
-- Returns: 1 removed, 0 missing or active
--@include base settle parent state remove
if removeJob(ARGV[2], ARGV[3] == "1", nowMs()) then return 1 end
return 0
