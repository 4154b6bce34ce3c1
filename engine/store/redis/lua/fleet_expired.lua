-- Fleet script: sessions past their expiry deadline.
-- ARGV[1] how many; sessions whose keys should have expired by the server's clock
return redis.call("ZRANGEBYSCORE", K_expiry_index(FB), "-inf", int(now_ms()), "LIMIT", 0,
                  tonumber(ARGV[1]))
