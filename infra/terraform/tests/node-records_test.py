"""node-records.py against a fake Route 53 (python3 tests/node-records_test.py).

test.sh runs it: the script is what keeps a dead machine's name from
pointing at an address AWS hands to somebody else.
"""
import importlib.util
import os
import sys
import unittest

here = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("node_records", os.path.join(here, "..", "node-records.py"))
node_records = importlib.util.module_from_spec(spec)
spec.loader.exec_module(node_records)


class InvalidChangeBatch(Exception):
    pass


class FakeRoute53:
    """A zone's A records, listed in name order as Route 53 lists them."""

    class exceptions:
        InvalidChangeBatch = InvalidChangeBatch

    def __init__(self, records, lose_race=False):
        self.records = dict(records)  # name -> ip
        self.lose_race = lose_race
        self.calls = []

    def list_resource_record_sets(self, HostedZoneId, StartRecordName, StartRecordType, MaxItems):
        assert HostedZoneId == "Z1"
        names = sorted(n for n in self.records if n >= StartRecordName)[: int(MaxItems)]
        return {
            "ResourceRecordSets": [
                {"Name": n, "Type": "A", "TTL": 60, "ResourceRecords": [{"Value": self.records[n]}]} for n in names
            ]
        }

    def change_resource_record_sets(self, HostedZoneId, ChangeBatch):
        (change,) = ChangeBatch["Changes"]
        rrset = change["ResourceRecordSet"]
        self.calls.append((change["Action"], rrset["Name"], rrset["ResourceRecords"][0]["Value"], rrset["TTL"]))
        if self.lose_race:
            raise InvalidChangeBatch("not found")
        del self.records[rrset["Name"]]


EVENT = {"InstanceId": "i-0abc", "ZoneId": "Z1", "Domain": "nodes.show.example.com", "Prefixes": ["e", "i"]}


class NodeRecordsTest(unittest.TestCase):
    def test_deletes_the_machines_name_as_it_is(self):
        r53 = FakeRoute53({
            "e-i-0abc.nodes.show.example.com.": "203.0.113.7",
            "e-i-0abd.nodes.show.example.com.": "203.0.113.8",
        })
        out = node_records.delete_node_records(r53, EVENT)
        self.assertEqual(out, {"deleted": ["e-i-0abc.nodes.show.example.com."]})
        self.assertEqual(r53.calls, [("DELETE", "e-i-0abc.nodes.show.example.com.", "203.0.113.7", 60)])
        self.assertIn("e-i-0abd.nodes.show.example.com.", r53.records)

    def test_another_machines_name_is_never_deleted(self):
        # No record of i-0abc: the listing starts at the next name.
        r53 = FakeRoute53({"e-i-0abcd.nodes.show.example.com.": "203.0.113.9", "i-i-1.nodes.show.example.com.": "1.2.3.4"})
        self.assertEqual(node_records.delete_node_records(r53, EVENT), {"deleted": []})
        self.assertEqual(r53.calls, [])

    def test_an_instance_that_was_no_node(self):
        r53 = FakeRoute53({})
        self.assertEqual(node_records.delete_node_records(r53, EVENT), {"deleted": []})

    def test_a_name_deleted_meanwhile_is_not_an_error(self):
        r53 = FakeRoute53({"i-i-0abc.nodes.show.example.com.": "198.51.100.1"}, lose_race=True)
        self.assertEqual(node_records.delete_node_records(r53, EVENT), {"deleted": []})
        self.assertEqual(len(r53.calls), 1)


if __name__ == "__main__":
    sys.exit(unittest.main())
